// A task's attempt on its card: the worktree's branch and state, the files changed (diff stat),
// the review (every changed file with its flags: cited, generated junk, symlink …, then the diff
// as text, escaped, lines coloured by class), and for owners on an accepted task the merge into
// the base branch of the files they tick — the cited ones ticked, junk flagged and unticked
// (fast-forward or a merge commit; conflicts listed, nothing forced). docs/tasks.md "What a
// merge takes".
// Shapes: docs/tasks.md "Shapes" (`attempt`) and the diff/merge endpoints there.

import { get, post } from "./api.js";
import { h, icon } from "./dom.js";
import { errorText, hasString, label, t } from "./i18n.js";
import { isOwner } from "./store.js";
import { openDialog, toastError } from "./ui.js";

/** The attempt block of a task card, or null when the task has no attempt. `reload` refetches
 * the board (after a merge). */
export function attemptSection(room, task, reload) {
  const attempt = task.attempt;
  if (!attempt) return null;
  const stat = attempt.diff_stat;
  const files = stat?.files || [];
  const mergeable = isOwner(room) && task.state === "accepted" && attempt.state !== "merged";
  return h("section", { class: "task-attempt", dataset: { state: attempt.state } },
    h("p", { class: "attempt-branch" },
      icon("branch"),
      h("code", { class: "branch-name", title: attempt.path || "", text: attempt.branch }),
      h("span", { class: ["badge", `attempt-${attempt.state}`], text: label("attemptState", attempt.state) })),
    stat
      ? h("details", { class: "diff-stat" },
        h("summary", {},
          h("span", { text: files.length ? t("attempt.files", { n: files.length }) : t("attempt.noChanges") }),
          files.length ? [h("span", { class: "diff-added", text: `+${stat.added}` }), h("span", { class: "diff-deleted", text: `−${stat.deleted}` })] : null),
        h("ul", { class: "diff-files" }, files.map((f) => h("li", { dataset: { path: f.path } },
          h("code", { text: f.path }),
          f.binary ? h("span", { class: "muted", text: t("attempt.binary") }) : [h("span", { class: "diff-added", text: `+${f.added}` }), h("span", { class: "diff-deleted", text: `−${f.deleted}` })]))))
      : null,
    h("div", { class: "attempt-actions" },
      h("button", { type: "button", class: "btn btn-small", dataset: { action: "diff" }, text: t("attempt.viewDiff"), on: { click: () => openDiff(room, task) } }),
      mergeable
        ? h("button", { type: "button", class: "btn btn-small btn-primary", dataset: { action: "merge" }, text: t("attempt.merge", { base: attempt.base }), on: { click: () => openMerge(room, task, reload) } })
        : null));
}

/** The diff as text: one span per line, classed by its first character (no HTML from the server). */
export function diffView(text) {
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return h("pre", { class: "diff" }, lines.map((line) => h("span", { class: ["diff-line", lineClass(line)], text: `${line}\n` })));
}

function lineClass(line) {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") || line.startsWith("index ")) return "diff-file";
  if (line.startsWith("@@")) return "diff-hunk";
  if (line.startsWith("+")) return "diff-add";
  if (line.startsWith("-")) return "diff-del";
  return "diff-context";
}

/** The changed files of a review (`GET …/diff` `files`): path, what changed, and the flags a
 * person decides by — cited by the task's evidence, generated junk (the pattern it matched), a
 * symlink or submodule. With `pick`, each row is a checkbox (its default: cited). */
export function reviewFiles(files, pick = false) {
  return h("ul", { class: ["review-files", pick && "review-pick"] }, files.map((f) => {
    const flags = [
      h("span", { class: ["badge", "file-status", `file-${f.status}`], text: label("fileStatus", f.status) }),
      f.kind !== "file" ? h("span", { class: ["badge", f.kind === "executable" ? null : "badge-warn"], dataset: { kind: f.kind }, text: label("fileKind", f.kind) }) : null,
      f.cited ? h("span", { class: "badge file-cited", text: t("review.cited") }) : null,
      f.junk ? h("span", { class: "badge badge-warn file-junk", title: f.junk, text: t("review.junk", { pattern: f.junk }) }) : null,
      f.binary ? h("span", { class: "muted", text: t("attempt.binary") }) : f.added !== null && f.added !== undefined ? [h("span", { class: "diff-added", text: `+${f.added}` }), h("span", { class: "diff-deleted", text: `−${f.deleted}` })] : null,
    ];
    const name = h("code", { class: "file-path", text: f.path });
    const item = { class: ["review-file", f.junk && "is-junk", f.cited && "is-cited"], dataset: { path: f.path } };
    if (!pick) return h("li", item, name, flags);
    return h("li", item, h("label", { class: "check" },
      h("input", { type: "checkbox", name: "merge-path", value: f.path, checked: Boolean(f.selected) }),
      h("span", { class: "review-file-line" }, name, flags)));
  }));
}

async function openDiff(room, task) {
  let data;
  try {
    data = await get(`/api/projects/${room.id}/tasks/${encodeURIComponent(task.key)}/diff`);
  } catch (err) {
    toastError(err);
    return;
  }
  const files = data.files || [];
  const junk = files.filter((f) => f.junk).length;
  await openDialog({
    title: t("attempt.diffTitle", { key: task.key, branch: data.branch || task.attempt.branch }),
    wide: true,
    className: "diff-dialog",
    build: (close) => [
      files.length ? h("p", { class: "review-summary muted", text: t("review.summary", { n: files.length, cited: files.filter((f) => f.cited).length, junk }) }) : null,
      files.length ? reviewFiles(files) : null,
      data.truncated ? h("p", { class: "badge badge-warn", text: t("attempt.diffTruncated") }) : null,
      data.text ? diffView(data.text) : h("p", { class: "muted", text: t("attempt.diffEmpty") }),
      h("div", { class: "dialog-actions" }, h("button", { type: "button", class: "btn btn-primary", text: t("common.done"), on: { click: () => close() } })),
    ],
  });
}

async function openMerge(room, task, reload) {
  const { branch, base } = task.attempt;
  const url = `/api/projects/${room.id}/tasks/${encodeURIComponent(task.key)}`;
  let review;
  try {
    review = await get(`${url}/diff`);
  } catch (err) {
    toastError(err);
    return;
  }
  const files = review.files || [];
  let merged = false;
  await openDialog({
    title: t("attempt.mergeTitle", { branch, base }),
    wide: true,
    className: "merge-dialog",
    build: (close) => {
      const radio = (mode, text) => h("label", { class: "check" },
        h("input", { type: "radio", name: "merge-mode", value: mode, checked: mode === "ff" }), h("span", { text }));
      const result = h("div", { class: "merge-result", attrs: { role: "status" } });
      const submit = h("button", { type: "submit", class: "btn btn-primary", text: t("attempt.mergeSubmit") });
      const count = h("span", { class: "merge-count" });
      const list = reviewFiles(files, true);
      const chosen = () => [...list.querySelectorAll("input[name=merge-path]:checked")].map((box) => /** @type {HTMLInputElement} */ (box).value);
      const recount = () => {
        const n = chosen().length;
        count.textContent = t("review.chosen", { n, total: files.length });
        submit.disabled = files.length > 0 && n === 0;
      };
      list.addEventListener("change", recount);
      const form = h("form", { class: "form merge-form" },
        h("p", { class: "dialog-text", text: t("attempt.mergeExplain", { base }) }),
        files.length
          ? h("fieldset", { class: "merge-files" }, h("legend", {}, t("review.filesLegend"), " ", count), list)
          : h("p", { class: "muted", text: t("attempt.diffEmpty") }),
        h("fieldset", { class: "merge-modes" }, h("legend", { text: t("attempt.mergeMode") }),
          radio("ff", t("attempt.modeFf", { base })), radio("merge", t("attempt.modeMerge"))),
        result,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.close"), on: { click: () => close() } }), submit));
      recount();
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const mode = form.querySelector("input[name=merge-mode]:checked")?.value || "ff";
        submit.disabled = true;
        try {
          const answer = await post(`${url}/merge`, { mode, paths: chosen(), digest: review.digest });
          result.replaceChildren(...outcomeView(answer, base).filter(Boolean));
          merged = ["fast_forward", "merged", "up_to_date"].includes(answer.outcome);
          if (merged) {
            submit.hidden = true;
            for (const box of list.querySelectorAll("input")) /** @type {HTMLInputElement} */ (box).disabled = true;
          }
        } catch (err) {
          result.replaceChildren(h("p", { class: "error-text", dataset: { code: err.code }, text: errorText(err) }));
        } finally {
          submit.disabled = false;
        }
      });
      return form;
    },
  });
  if (merged) reload();
}

function outcomeView(answer, base) {
  const ok = ["fast_forward", "merged", "up_to_date"].includes(answer.outcome);
  const conflicts = answer.conflicts || [];
  const included = answer.included || [];
  const leftOut = answer.left_out || [];
  return [
    h("p", { class: ["merge-outcome", ok ? "ok" : "warn"], dataset: { outcome: answer.outcome }, text: hasString(`mergeOutcome.${answer.outcome}`) ? t(`mergeOutcome.${answer.outcome}`, { base: answer.base || base }) : answer.outcome }),
    ok && included.length ? h("p", { class: "muted merge-taken", text: leftOut.length ? t("review.takenLeft", { n: included.length, left: leftOut.length }) : t("review.taken", { n: included.length }) }) : null,
    conflicts.length ? h("ul", { class: "merge-conflicts" }, conflicts.map((path) => h("li", {}, h("code", { text: path })))) : null,
    answer.head_oneline ? h("p", { class: "muted merge-head" }, t("attempt.head", { base: answer.base || base }), " ", h("code", { text: answer.head_oneline })) : null,
  ];
}
