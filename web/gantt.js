// The Gantt chart as SVG, built with DOM APIs (createElementNS, textContent; never innerHTML).
// One row per project (or per task inside a project, in the dependency order the server sends),
// a today line, overdue bars in red and at-risk ones in orange, milestones as diamonds.
// Drawn at the container's real width so the text stays readable at 600 px.

const SVG_NS = "http://www.w3.org/2000/svg";
const DAY_MS = 86_400_000;
const ROW = 34;
const ROW_NAMED = 46; // a row whose milestones are named under the bar
const AXIS = 26;
const PAD = 8;

function el(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function text(attrs, content) {
  const node = el("text", attrs);
  node.textContent = content;
  return node;
}

function tooltip(content) {
  const node = el("title");
  node.textContent = content;
  return node;
}

/** Days since the epoch of a YYYY-MM-DD string (UTC), or null. */
export function dayNumber(iso) {
  if (!iso) return null;
  const ms = Date.parse(`${iso}T00:00:00Z`);
  return Number.isFinite(ms) ? Math.round(ms / DAY_MS) : null;
}

function isoOf(day) {
  return new Date(day * DAY_MS).toISOString().slice(0, 10);
}

/** Cut `value` to about `max` columns (CJK counts double) with an ellipsis. */
function fit(value, max) {
  let width = 0;
  let out = "";
  for (const ch of value) {
    width += /[\u1100-\uffff]/.test(ch) ? 2 : 1;
    if (width > max) return `${out}…`;
    out += ch;
  }
  return out;
}

/**
 * rows: [{id, label, sub, start, end, progress, overdue, atRisk, milestones: [{name, date, status}]}]
 * Returns an <svg> `width` pixels wide.
 */
export function ganttSvg({ rows, today, width, labels }) {
  const todayDay = dayNumber(today);
  const days = [todayDay];
  for (const row of rows) {
    for (const d of [row.start, row.end, ...row.milestones.map((m) => m.date)]) {
      const n = dayNumber(d);
      if (n !== null) days.push(n);
    }
  }
  let lo = Math.min(...days) - 3;
  let hi = Math.max(...days) + 3;
  if (hi - lo < 14) hi = lo + 14;
  const labelWidth = Math.round(Math.min(200, Math.max(110, width * 0.26)));
  const chartLeft = labelWidth + PAD;
  const chartWidth = Math.max(120, width - chartLeft - PAD);
  const x = (day) => chartLeft + ((day - lo) / (hi - lo)) * chartWidth;
  const rowHeight = rows.some((row) => row.milestones.length) ? ROW_NAMED : ROW;
  const height = AXIS + Math.max(1, rows.length) * rowHeight + PAD;

  const svg = el("svg", {
    class: "gantt-svg",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": labels.chart,
  });

  // The axis: a tick per week (or per month on long spans), labelled MM-DD.
  const axis = el("g", { class: "gantt-axis" });
  const span = hi - lo;
  const step = span > 240 ? 30 : span > 90 ? 14 : 7;
  const minLabelGap = 44;
  let lastLabelX = -Infinity;
  const todayX = todayDay >= lo && todayDay <= hi ? x(todayDay) + chartWidth / (hi - lo) / 2 : null;
  for (let d = lo + ((7 - ((lo + 3) % 7)) % 7); d <= hi; d += step) {
    const px = x(d);
    axis.append(el("line", { x1: px, x2: px, y1: AXIS - 4, y2: height - PAD, class: "gantt-grid" }));
    // Leave room for the "today" label above the today line.
    const nearToday = todayX !== null && Math.abs(px - todayX) < 36;
    if (px - lastLabelX >= minLabelGap && px + 20 < width && !nearToday) {
      axis.append(text({ x: px, y: AXIS - 9, class: "gantt-tick", "text-anchor": "middle" }, isoOf(d).slice(5)));
      lastLabelX = px;
    }
  }
  svg.append(axis);

  rows.forEach((row, i) => {
    const top = AXIS + i * rowHeight;
    const mid = top + ROW / 2;
    const g = el("g", { class: ["gantt-row", row.overdue && "is-overdue", row.atRisk && "is-at-risk"].filter(Boolean).join(" "), "data-row-id": row.id });
    if (i % 2 === 1) g.append(el("rect", { x: 0, y: top, width, height: rowHeight, class: "gantt-stripe" }));
    const maxChars = Math.floor((labelWidth - 8) / 7.2);
    const name = text({ x: 4, y: mid - (row.sub ? 3 : -4), class: "gantt-label" }, fit(row.label, maxChars));
    name.append(tooltip(row.label));
    g.append(name);
    if (row.sub) g.append(text({ x: 4, y: mid + 11, class: "gantt-sub" }, fit(row.sub, maxChars + 4)));

    const s = dayNumber(row.start);
    const e = dayNumber(row.end);
    if (s !== null || e !== null) {
      const x0 = x(s ?? e);
      const x1 = Math.max(x0 + 3, x(e ?? s) + (e !== null ? chartWidth / (hi - lo) : 0));
      const kind = row.overdue ? "overdue" : row.atRisk ? "at-risk" : "normal";
      const track = el("rect", { x: x0, y: mid - 7, width: x1 - x0, height: 14, rx: 3, class: `gantt-track gantt-${kind}` });
      track.append(tooltip(`${row.label}: ${row.start || "…"} → ${row.end || "…"} · ${row.progress ?? 0}%`));
      g.append(track);
      const done = Math.max(0, Math.min(100, row.progress ?? 0)) / 100;
      if (done > 0) g.append(el("rect", { x: x0, y: mid - 7, width: (x1 - x0) * done, height: 14, rx: 3, class: `gantt-done gantt-${kind}` }));
    } else {
      g.append(text({ x: chartLeft + 4, y: mid + 4, class: "gantt-none" }, labels.unscheduled));
    }
    for (const m of row.milestones) {
      const d = dayNumber(m.date);
      if (d === null) continue;
      const cx = x(d) + chartWidth / (hi - lo) / 2;
      const r = 6.5;
      const diamond = el("polygon", {
        points: `${cx},${mid - r} ${cx + r},${mid} ${cx},${mid + r} ${cx - r},${mid}`,
        class: `gantt-milestone ms-${m.status}`,
        "data-milestone": m.name,
      });
      diamond.append(tooltip(`◆ ${m.name} · ${m.date} · ${labels.status[m.status] || m.status}`));
      g.append(diamond);
      // Named on the chart (it showed only diamonds): below the bar, left of the diamond when
      // it would run past the right edge.
      const room = width - PAD - cx;
      const name = fit(m.name, 16);
      const anchor = room < name.length * 7 + 10 ? "end" : "start";
      g.append(text({ x: anchor === "end" ? cx - r - 2 : cx + r + 2, y: mid + 17, class: `gantt-ms-label ms-${m.status}`, "text-anchor": anchor }, name));
    }
    svg.append(g);
  });

  if (todayX !== null) {
    const tx = todayX;
    svg.append(el("line", { x1: tx, x2: tx, y1: AXIS - 2, y2: height - PAD, class: "gantt-today" }));
    svg.append(text({ x: Math.min(tx, width - 20), y: AXIS - 9, class: "gantt-today-label", "text-anchor": "middle" }, labels.today));
  }
  return svg;
}
