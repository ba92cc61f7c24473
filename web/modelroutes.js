// Model routes: the choices the server reports as available (GET /api/providers), the project and
// role defaults, pool mode, usage and the loop brake (the "模型" tab of the side panel).

import { get, post } from "./api.js";
import { h } from "./dom.js";
import { errorText, formatDateTime, formatNumber, label, t } from "./i18n.js";
import { app, isOwner, mayChange, member } from "./store.js";
import { toast, toastError } from "./ui.js";

export const AGENT_ROLES = ["lead", "frontend", "backend", "tester", "devops", "design", "docs"];

export async function loadProviders(force = false) {
  if (!app.providers || force) app.providers = (await get(`/api/providers${force ? "?refresh=1" : ""}`)).providers;
  return app.providers;
}

/** Every `provider/model` the server reports, available or not (with why not). */
export function routeChoices() {
  const choices = [];
  for (const p of app.providers || []) {
    const models = p.models.length ? p.models : [null];
    for (const model of models) {
      choices.push({
        value: model ? `${p.name}/${model}` : null,
        provider: p.label || p.name,
        available: p.available && Boolean(model),
        reason: p.available ? (model ? null : t("models.noCatalogue")) : p.detail || p.reason || t("models.unavailable"),
        offline: p.offline,
      });
    }
  }
  return choices;
}

/**
 * A <select> of routes; `none` is the label of the empty choice ("" → no setting).
 * @param {{ id: string, value?: string, none: string, labelText?: string | null }} options
 */
export function routeSelect({ id, value = "", none, labelText }) {
  const select = h("select", { id, attrs: labelText ? { "aria-label": labelText } : {} });
  select.append(h("option", { value: "", text: none }));
  for (const choice of routeChoices()) {
    if (!choice.value) {
      select.append(h("option", { value: "", disabled: true, text: `${choice.provider} — ${choice.reason}` }));
      continue;
    }
    const text = choice.available ? `${choice.value}${choice.offline ? ` · ${t("models.offline")}` : ""}` : `${choice.value} — ${choice.reason}`;
    select.append(h("option", { value: choice.value, disabled: !choice.available, text }));
  }
  if (value && ![...select.options].some((o) => o.value === value)) select.append(h("option", { value, text: `${value} (${t("models.notListed")})` }));
  select.value = value || "";
  return select;
}

export function changeRoute(room, scope, target, value, reason) {
  return post(`/api/projects/${room.id}/routes`, { scope, target: String(target ?? ""), value, reason });
}

export class ModelRoutesTab {
  constructor(el) {
    this.el = el;
    this.room = null;
  }

  /** Load and render; `{background: true}` (a change announced in the room) never disturbs a
   * form being filled in, and nothing is re-rendered when nothing changed. */
  async load(room, { background = false } = {}) {
    const fresh = room !== this.room;
    this.room = room;
    if (background && this.isEditing()) return;
    if (fresh || !this.el.childElementCount) {
      this.signature = null;
      this.el.replaceChildren(h("p", { class: "muted", text: t("common.loading") }));
    }
    try {
      const [routes, usage, brake] = await Promise.all([
        get(`/api/projects/${room.id}/routes`),
        get(`/api/projects/${room.id}/usage`),
        get(`/api/projects/${room.id}/brake`).then((data) => data.brake),
        loadProviders(),
      ]);
      if (room !== this.room) return;
      const signature = JSON.stringify([routes, usage, brake, mayChange(room)]); // forms follow the state
      if (signature === this.signature || (background && this.isEditing())) return;
      this.signature = signature;
      this.render(routes, usage, brake);
    } catch (err) {
      this.el.replaceChildren(h("p", { class: "error-text", text: errorText(err) }));
    }
  }

  isEditing() {
    const focusInside = this.el.contains(document.activeElement) && document.activeElement.matches("input, select, textarea");
    return focusInside || [...this.el.querySelectorAll("input[type=text]")].some((input) => input.value.trim());
  }

  render(routes, usage, brake) {
    const room = this.room;
    const owner = mayChange(room); // an owner, in a project that takes changes
    const settings = new Map(routes.settings.map((s) => [`${s.scope}:${s.target}`, s]));
    const projectDefault = settings.get("project:")?.value || "";
    const pool = parsePool(settings.get("pool:")?.value);
    const sections = [];


    const projectForm = routeForm(room, {
      id: "route-project",
      labelText: t("models.projectDefault"),
      value: projectDefault,
      none: t("models.fallback"),
      disabled: !owner,
      save: (value, reason) => changeRoute(room, "project", "", value, reason),
      done: () => this.load(room),
    });
    sections.push(section(t("models.projectDefault"), projectForm));

    const roleRows = roleDefaults(room, settings, owner, () => this.load(room));
    sections.push(section(t("models.roleDefaults"), roleRows));
    sections.push(section(t("models.pool"), poolView(room, pool, owner, () => this.load(room))));
    sections.push(section(t("models.usage"), usageView(room, usage)));
    sections.push(section(t("models.brake"), brakeView(room, brake, owner, () => this.load(room))));
    sections.push(section(t("models.history"), historyView(room, routes.history)));
    if (!owner) sections.unshift(h("p", { class: "muted note", text: isOwner(room) ? t("models.closedNote") : t("models.ownerOnly") }));
    this.el.replaceChildren(...sections);
  }
}

/** Current role defaults as a list, and one form to set or clear the default of a role. */
function roleDefaults(room, settings, owner, done) {
  const current = (role) => settings.get(`role:${role}`)?.value || "";
  const list = h("ul", { class: "role-defaults" });
  for (const role of AGENT_ROLES) {
    if (!current(role)) continue;
    list.append(h("li", { dataset: { role } }, h("span", { class: "route-label", text: label("role", role) }), h("code", { text: current(role) })));
  }
  if (!list.childElementCount) list.append(h("li", { class: "muted", text: t("models.noRoleDefaults") }));
  const role = h("select", { id: "route-role-which", disabled: !owner, attrs: { "aria-label": t("create.role") } },
    AGENT_ROLES.map((r) => h("option", { value: r, text: label("role", r) })));
  const holder = h("div", { class: "role-form-holder" });
  const build = () => holder.replaceChildren(routeForm(room, {
    id: "route-role",
    labelText: t("models.roleModel", { role: label("role", role.value) }),
    value: current(role.value),
    none: t("models.inherit"),
    disabled: !owner,
    save: (value, reason) => changeRoute(room, "role", role.value, value, reason),
    done,
  }));
  role.addEventListener("change", build);
  build();
  return h("div", { class: "route-roles" }, list, role, holder);
}

function section(title, ...content) {
  return h("section", { class: "panel-section" }, h("h3", { text: title }), ...content);
}

function parsePool(value) {
  try {
    const data = JSON.parse(value || "null");
    return data ? { models: data.models || [], enabled: Boolean(data.enabled) } : { models: [], enabled: false };
  } catch {
    return { models: [], enabled: false };
  }
}

/** A route picker with a required public reason; `save(value|null, reason)`. */
export function routeForm(room, { id, labelText, value, none, disabled, compact = false, save, done }) {
  const select = routeSelect({ id, value, none, labelText: compact ? labelText : null });
  const reason = h("input", { type: "text", id: `${id}-reason`, maxLength: 500, placeholder: t("models.reasonPlaceholder"), attrs: { "aria-label": t("models.reason") } });
  const button = h("button", { type: "submit", class: "btn btn-small", text: t("common.save") });
  select.disabled = reason.disabled = button.disabled = disabled;
  const form = h(
    "form",
    { class: ["route-form", compact && "compact"], dataset: { route: id } },
    compact ? h("label", { class: "route-label", htmlFor: id, text: labelText }) : h("label", { class: "visually-hidden", htmlFor: id, text: labelText }),
    select,
    reason,
    button,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!reason.value.trim()) {
      reason.setCustomValidity(t("models.reasonRequired"));
      reason.reportValidity();
      return;
    }
    reason.setCustomValidity("");
    button.disabled = true;
    try {
      await save(select.value || null, reason.value.trim());
      toast(t("models.saved"));
      done();
    } catch (err) {
      toastError(err);
    } finally {
      button.disabled = false;
    }
  });
  reason.addEventListener("input", () => reason.setCustomValidity(""));
  return form;
}

function poolView(room, pool, owner, done) {
  const enabled = h("input", { type: "checkbox", id: "pool-enabled", checked: pool.enabled, disabled: !owner });
  const boxes = h("div", { class: "pool-models" });
  for (const choice of routeChoices()) {
    if (!choice.value) continue;
    const box = h("input", { type: "checkbox", value: choice.value, checked: pool.models.includes(choice.value), disabled: !owner });
    boxes.append(h("label", { class: "check" }, box, h("span", { text: choice.value }), choice.available ? null : h("span", { class: "muted", text: ` — ${choice.reason}` })));
  }
  const reason = h("input", { type: "text", maxLength: 500, placeholder: t("models.reasonPlaceholder"), disabled: !owner, attrs: { "aria-label": t("models.reason") } });
  const form = h(
    "form",
    { class: "pool-form" },
    h("p", { class: "muted", text: t("models.poolExplain") }),
    h("label", { class: "check" }, enabled, h("span", { text: t("models.poolMode") })),
    boxes,
    h("div", { class: "row" }, reason, h("button", { type: "submit", class: "btn btn-small", disabled: !owner, text: t("common.save") })),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!reason.value.trim()) {
      reason.setCustomValidity(t("models.reasonRequired"));
      reason.reportValidity();
      return;
    }
    const models = [...boxes.querySelectorAll("input:checked")].map((b) => b.value);
    try {
      await changeRoute(room, "pool", "", JSON.stringify({ models, enabled: enabled.checked }), reason.value.trim());
      toast(t("models.saved"));
      done();
    } catch (err) {
      toastError(err);
    }
  });
  reason.addEventListener("input", () => reason.setCustomValidity(""));
  return form;
}

function usageView(room, usage) {
  const list = h("dl", { class: "stats" },
    h("dt", { text: t("usage.requests") }), h("dd", { text: formatNumber(usage.requests) }),
    h("dt", { text: t("usage.input") }), h("dd", { text: formatNumber(usage.input_tokens) }),
    h("dt", { text: t("usage.output") }), h("dd", { text: formatNumber(usage.output_tokens) }));
  const rows = Object.entries(usage.members || {}).map(([id, u]) => {
    const m = member(room, Number(id));
    return h("tr", {}, h("td", { text: m ? m.display_name : `#${id}` }), h("td", { text: formatNumber(u.requests) }), h("td", { text: `${formatNumber(u.input_tokens)} / ${formatNumber(u.output_tokens)}` }));
  });
  const table = rows.length
    ? h("table", { class: "mini-table" }, h("thead", {}, h("tr", {}, h("th", { text: t("usage.member") }), h("th", { text: t("usage.requests") }), h("th", { text: t("usage.tokens") }))), h("tbody", {}, rows))
    : null;
  const note = usage.requests_without_usage ? h("p", { class: "muted", text: t("usage.unreported", { n: usage.requests_without_usage }) }) : null;
  return h("div", {}, list, table, note, h("p", { class: "muted", text: t("usage.noMoney") }));
}

function brakeView(room, brake, owner, done) {
  const limits = brake.limits || {};
  const tripped = brake.tripped;
  // A brake holds the loop it caught (docs/agents.md, "The loop brake"): say whom, when not everyone.
  const held = (brake.held_members || []).map((m) => `@${m.handle}`).join("、");
  const trippedText = held
    ? t("brake.trippedFor", { reason: label("brakeReason", tripped), who: held })
    : t("brake.tripped", { reason: label("brakeReason", tripped) });
  const status = h("p", { class: ["brake-status", tripped ? "is-tripped" : "is-ok"], attrs: { role: "status" }, text: tripped ? trippedText : t("brake.ok") });
  const counters = h("dl", { class: "stats brake-stats" },
    h("dt", { text: t("brake.turns") }), h("dd", { text: `${formatNumber(brake.agent_turns)} / ${formatNumber(limits.agent_turn_cap)}` }),
    h("dt", { text: t("brake.tokens") }), h("dd", { text: `${formatNumber(brake.tokens_used)} / ${limits.token_budget ? formatNumber(limits.token_budget) : t("brake.noBudget")}` }),
    h("dt", { text: t("brake.steps") }), h("dd", { text: formatNumber(limits.max_steps) }));
  const clear = tripped
    ? h("button", { type: "button", class: "btn btn-small btn-primary", text: t("brake.clear"), on: { click: async () => {
      try {
        await post(`/api/projects/${room.id}/brake/clear`, {});
        done();
      } catch (err) {
        toastError(err);
      }
    } } })
    : null;
  const field = (name, value, min) => h("label", { class: "limit" }, h("span", { text: t(`brake.limit.${name}`) }), h("input", { type: "number", name, min, value: value ?? "", disabled: !owner }));
  const form = h("form", { class: "limits-form" },
    field("agent_turn_cap", limits.agent_turn_cap, 1), field("token_budget", limits.token_budget, 1), field("max_steps", limits.max_steps, 1),
    h("button", { type: "submit", class: "btn btn-small", disabled: !owner, text: t("brake.saveLimits") }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {};
    for (const input of form.querySelectorAll("input")) if (input.value) body[input.name] = Number(input.value);
    try {
      await post(`/api/projects/${room.id}/limits`, body);
      toast(t("models.saved"));
      done();
    } catch (err) {
      toastError(err);
    }
  });
  return h("div", {}, status, counters, clear, form);
}

function historyView(room, history) {
  if (!history.length) return h("p", { class: "muted", text: t("models.noHistory") });
  const list = h("ol", { class: "route-history" });
  for (const change of history.slice(0, 20)) {
    const who = change.author_id ? member(room, change.author_id) : null;
    list.append(h("li", {},
      h("span", { class: "badge", text: `v${change.config_version}` }),
      h("span", { text: ` ${label("routeScope", change.scope)}${change.target ? ` ${scopeTarget(room, change)}` : ""}: ` }),
      h("code", { text: change.new_value ?? t("models.cleared") }),
      h("span", { class: "muted", text: ` — ${change.reason} · ${who ? who.display_name : change.author_kind} · ${formatDateTime(change.at)}` })));
  }
  return list;
}

function scopeTarget(room, change) {
  if (change.scope === "role") return label("role", change.target);
  const m = member(room, Number(change.target));
  return m ? `@${m.handle}` : change.target;
}
