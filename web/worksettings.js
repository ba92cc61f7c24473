// What the project's agents may do (docs/agents.md "Project settings"): network for commands,
// unsandboxed commands, read-only roles, the five work limits and the patterns a merge flags as
// generated (`merge_ignore`, docs/tasks.md "What a merge takes"), shown to everyone from the
// project object's `settings`; owners change them (`PATCH /api/projects/{id}/settings`, refusals
// translated by code, the shown values are the answer's). And the worktrees the project's task
// attempts keep (`GET /api/projects/{id}/worktrees`). Both live in the workspace dialog.

import { get, patch } from "./api.js";
import { h } from "./dom.js";
import { errorText, formatDateTime, formatNumber, hasString, label, t } from "./i18n.js";
import { AGENT_ROLES } from "./modelroutes.js";
import { isOwner, mayChange, member, upsertProject } from "./store.js";
import { toast } from "./ui.js";

export const WORK_LIMITS = ["tool_calls_per_turn", "command_timeout_secs", "command_output_bytes", "command_secs_per_turn", "workspace_disk_mib"];

/** Whether this server runs commands in a sandbox, as the agents' member objects say
 * (`sandboxed`); null when no member says. */
export function serverSandbox(members) {
  const said = (members || []).filter((m) => m.kind === "agent" && typeof m.sandboxed === "boolean");
  if (!said.length) return null;
  return said.some((m) => m.sandboxed);
}

function limitText(settings, key) {
  const value = settings.limits?.[key];
  return t(`settings.unit.${key}`, { n: formatNumber(value) });
}

function isSet(settings, key) {
  return (settings.limits_set || []).includes(key);
}

/** The settings as facts, for everyone. */
export function settingsFacts(settings, sandbox) {
  if (!settings || typeof settings !== "object") return h("p", { class: "muted", text: t("settings.unknown") });
  const roles = settings.read_only_roles || [];
  const defaults = settings.limit_defaults || null;
  return h("dl", { class: "facts work-settings-facts" },
    sandbox === null ? null : [
      h("dt", { text: t("settings.sandbox") }),
      h("dd", { class: "settings-sandbox", dataset: { sandboxed: String(sandbox) }, text: sandbox ? t("settings.sandboxYes") : t("settings.sandboxNo") })],
    h("dt", { text: t("settings.network") }),
    h("dd", { class: "settings-network", dataset: { on: String(settings.network) }, text: settings.network ? t("settings.networkOn") : t("settings.networkOff") }),
    h("dt", { text: t("settings.unsandboxed") }),
    h("dd", { class: "settings-unsandboxed", dataset: { on: String(settings.unsandboxed) } },
      settings.unsandboxed
        ? [h("span", { class: "badge badge-warn", text: t("settings.unsandboxedBadge") }), " ", h("span", { text: sandbox ? t("settings.unsandboxedMoot") : t("settings.unsandboxedOn") })]
        : h("span", { text: t("settings.unsandboxedOff") })),
    h("dt", { text: t("settings.readOnlyRoles") }),
    h("dd", { class: "settings-roles" }, roles.length
      ? roles.map((role) => h("span", { class: "badge", dataset: { role }, text: label("role", role) }))
      : h("span", { class: "muted", text: t("settings.noReadOnlyRoles") })),
    WORK_LIMITS.map((key) => [
      h("dt", { text: t(`settings.limit.${key}`) }),
      h("dd", { class: "settings-limit", dataset: { limit: key, set: String(isSet(settings, key)) } },
        h("span", { class: "limit-value", text: limitText(settings, key) }),
        " ",
        isSet(settings, key)
          ? defaults ? h("span", { class: "muted", text: t("settings.overrides", { value: t(`settings.unit.${key}`, { n: formatNumber(defaults[key]) }) }) }) : null
          : h("span", { class: "muted limit-default", text: t("settings.isDefault") })),
    ]),
    Array.isArray(settings.merge_ignore) ? [
      h("dt", { text: t("settings.mergeIgnore") }),
      h("dd", { class: "settings-merge-ignore", dataset: { set: String(Boolean(settings.merge_ignore_set)) } },
        h("span", { text: t("settings.mergeIgnoreCount", { n: settings.merge_ignore.length }) }), " ",
        h("span", { class: "muted", text: settings.merge_ignore_set ? t("settings.mergeIgnoreCustom") : t("settings.mergeIgnoreDefault") }),
        h("span", { class: "merge-ignore-list" }, settings.merge_ignore.map((p) => h("code", { text: p }))))] : null);
}

/** The name of a refused field (`details.field` of a `bad_body`) in the interface language. */
function fieldName(field) {
  const [head, sub] = String(field).split(".");
  if (head === "limits" && WORK_LIMITS.includes(sub)) return t(`settings.limit.${sub}`);
  if (head === "read_only_roles") return t("settings.readOnlyRoles");
  if (head === "network" || head === "unsandboxed") return t(`settings.${head}`);
  return field;
}

/** A refusal of the settings PATCH in the interface language, from its code. */
export function settingsErrorText(err) {
  if (err?.code === "bad_body" && err.details?.field) return t("settingsError.bad_value", { field: fieldName(err.details.field) });
  if (err?.code === "bad_merge_ignore") {
    const problem = `mergeIgnoreProblem.${err.details?.problem}`;
    return t("settingsError.bad_merge_ignore", { position: err.details?.position ?? "", pattern: err.details?.pattern ?? "", problem: hasString(problem) ? t(problem) : err.details?.reason || "" });
  }
  const key = `settingsError.${err?.code}`;
  if (err?.code && hasString(key)) return t(key);
  return errorText(err);
}

/** The section of the workspace dialog: facts for everyone, the form for owners. `onSaved`
 * receives the server's settings after a change. */
export function settingsSection(room, settings, sandbox) {
  const facts = h("div", { class: "work-settings-view" }, settingsFacts(settings, sandbox));
  const nodes = [h("h3", { text: t("settings.title") }), h("p", { class: "muted", text: t("settings.explain") }), facts];
  if (!settings || typeof settings !== "object") return h("section", { class: "work-settings" }, nodes);
  if (!mayChange(room)) {
    nodes.push(h("p", { class: "muted settings-owner-only", text: isOwner(room) ? t("settings.closedNote") : t("settings.ownerOnly") }));
    return h("section", { class: "work-settings" }, nodes);
  }
  const holder = h("div", {});
  const render = (current) => {
    facts.replaceChildren(settingsFacts(current, sandbox));
    holder.replaceChildren(settingsForm(room, current, render));
  };
  render(settings);
  nodes.push(holder);
  return h("section", { class: "work-settings" }, nodes);
}

function settingsForm(room, settings, render) {
  const check = (id, checked, text, hint = null) => h("label", { class: "check" },
    h("input", { type: "checkbox", id, checked }),
    h("span", {}, text, hint ? h("span", { class: "field-hint", text: hint }) : null));
  const network = check("settings-network", settings.network, t("settings.networkField"));
  const unsandboxed = check("settings-unsandboxed", settings.unsandboxed, t("settings.unsandboxedField"), t("settings.unsandboxedHint"));
  const roles = h("fieldset", { class: "settings-roles-field" },
    h("legend", { text: t("settings.readOnlyRoles") }),
    h("div", { class: "role-checks" }, AGENT_ROLES.map((role) => h("label", { class: "check" },
      h("input", { type: "checkbox", name: "read-only-role", value: role, checked: (settings.read_only_roles || []).includes(role) }),
      h("span", { text: label("role", role) })))),
    h("p", { class: "field-hint", text: t("settings.readOnlyHint") }));
  const inputs = new Map();
  const limits = h("fieldset", { class: "settings-limits-field" }, h("legend", { text: t("settings.limits") }),
    WORK_LIMITS.map((key) => {
      const id = `settings-limit-${key}`;
      const fallback = settings.limit_defaults?.[key];
      const input = h("input", {
        type: "number", id, step: "any", value: isSet(settings, key) ? String(settings.limits[key]) : "",
        placeholder: fallback === undefined ? t("settings.isDefault") : t("settings.defaultIs", { n: fallback }),
        attrs: { inputmode: "decimal" },
      });
      inputs.set(key, input);
      return h("div", { class: "limit settings-limit-row", dataset: { limit: key } },
        h("label", { htmlFor: id, text: t(`settings.limit.${key}`) }),
        h("span", { class: "limit-input" }, input,
          h("button", { type: "button", class: "btn btn-small", dataset: { action: "default" }, text: t("settings.useDefault"), attrs: { "aria-label": t("settings.useDefaultFor", { name: t(`settings.limit.${key}`) }) }, on: { click: () => {
            input.value = "";
            input.focus();
          } } })));
    }),
    h("p", { class: "field-hint", text: t("settings.limitsHint") }));
  const shownIgnore = Array.isArray(settings.merge_ignore) ? settings.merge_ignore : null;
  const ignoreBox = h("textarea", { id: "settings-merge-ignore", rows: 6, spellcheck: false, value: (shownIgnore || []).join("\n"), attrs: { autocapitalize: "off", autocomplete: "off" } });
  let ignoreReset = false;
  ignoreBox.addEventListener("input", () => { ignoreReset = false; });
  const ignore = shownIgnore === null ? null : h("div", { class: "field settings-merge-ignore-field" },
    h("label", { htmlFor: "settings-merge-ignore", text: t("settings.mergeIgnoreField") }),
    ignoreBox,
    h("p", { class: "field-hint", text: t("settings.mergeIgnoreHint") }),
    h("button", { type: "button", class: "btn btn-small", dataset: { action: "merge-ignore-default" }, text: t("settings.mergeIgnoreReset"), on: { click: () => {
      ignoreBox.value = (settings.merge_ignore_default || []).join("\n");
      ignoreReset = true;
    } } }));
  const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
  const submit = h("button", { type: "submit", class: "btn btn-primary", text: t("settings.save") });
  const form = h("form", { class: "form work-settings-form", attrs: { novalidate: true } },
    h("h4", { text: t("settings.change") }), network, unsandboxed, roles, limits, ignore, error,
    h("div", { class: "dialog-actions" }, submit));
  const fail = (text, code = "") => {
    error.textContent = text;
    error.dataset.code = code;
    error.hidden = false;
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const body = {
      network: network.querySelector("input").checked,
      unsandboxed: unsandboxed.querySelector("input").checked,
      read_only_roles: [...roles.querySelectorAll("input:checked")].map((box) => box.value),
      limits: {},
    };
    for (const [key, input] of inputs) {
      const text = input.value.trim();
      const value = Number(text);
      if (input.validity.badInput || (text && !Number.isFinite(value))) {
        fail(t("settingsError.bad_value", { field: t(`settings.limit.${key}`) }), "not_a_number");
        input.focus();
        return;
      }
      body.limits[key] = text ? value : null;
    }
    if (shownIgnore !== null) {
      const lines = ignoreBox.value.split("\n").map((line) => line.trim()).filter(Boolean);
      if (ignoreReset) body.merge_ignore = null;
      else if (lines.join("\n") !== shownIgnore.join("\n")) body.merge_ignore = lines;
    }
    submit.disabled = true;
    try {
      const answer = await patch(`/api/projects/${room.id}/settings`, body);
      upsertProject({ id: room.id, settings: answer.settings });
      render(answer.settings);
      toast(t("settings.saved"));
    } catch (err) {
      fail(settingsErrorText(err), err.code);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

/** The kept worktrees: what each task attempt left on disk (and branches git keeps with no
 * attempt on record), so a person sees what an agent that left or failed left behind. */
export async function worktreesSection(room) {
  const box = h("section", { class: "worktrees" }, h("h3", { text: t("worktrees.title") }), h("p", { class: "muted", text: t("common.loading") }));
  let data;
  try {
    data = await get(`/api/projects/${room.id}/worktrees`);
  } catch (err) {
    box.lastChild.replaceWith(h("p", { class: "error-text", text: errorText(err) }));
    return box;
  }
  const attempts = data.attempts || [];
  if (!attempts.length) {
    box.lastChild.replaceWith(h("p", { class: "muted worktrees-empty", text: data.mode === "serial" ? t("worktrees.serial") : t("worktrees.none") }));
    return box;
  }
  const rows = attempts.map((a) => {
    const who = a.member_id ? member(room, a.member_id) : null;
    const flags = [];
    if (!a.on_disk) flags.push(h("span", { class: "badge", text: t("worktrees.gone") }));
    if (a.missing) flags.push(h("span", { class: "badge badge-warn", text: t("worktrees.missing") }));
    if (a.dirty) flags.push(h("span", { class: "badge badge-warn", dataset: { dirty: "true" }, text: t("worktrees.dirty") }));
    else if (a.on_disk) flags.push(h("span", { class: "muted", text: t("worktrees.clean") }));
    return h("tr", { class: "worktree-row", dataset: { branch: a.branch || "", task: a.task || "", state: a.state } },
      h("td", {}, h("code", { class: "branch-name", title: a.path || "", text: a.branch || "—" })),
      h("td", { class: "worktree-task" }, a.task ? h("span", { text: a.task }) : h("span", { class: "muted", text: t("worktrees.noTask") }),
        who ? h("span", { class: "muted", text: ` · ${who.display_name}` }) : null),
      h("td", {}, h("span", { class: ["badge", `attempt-${a.state}`], text: label("attemptState", a.state) }),
        a.created_at ? h("span", { class: "muted worktree-when", text: ` ${formatDateTime(a.created_at)}` }) : null),
      h("td", { class: "worktree-ahead" }, a.on_disk && typeof a.ahead === "number"
        ? t("worktrees.aheadBehind", { ahead: a.ahead, behind: a.behind ?? 0 })
        : h("span", { class: "muted", text: "—" })),
      h("td", { class: "worktree-dirty" }, flags));
  });
  box.lastChild.replaceWith(h("div", { class: "table-scroll" }, h("table", { class: "mini-table worktrees-table" },
    h("thead", {}, h("tr", {}, ["branch", "task", "state", "ahead", "dirty"].map((k) => h("th", { text: t(`worktrees.col.${k}`) })))),
    h("tbody", {}, rows))));
  return box;
}
