// The projects column (进行中 / 已归档 / 回收站) and the create-project dialog: name, workspace
// folder, overall goal, initial members by role, and a model for each from the routes the
// server reports as available.

import { get, post } from "./api.js";
import { $, h, icon } from "./dom.js";
import { errorText, label, t } from "./i18n.js";
import { field } from "./members.js";
import { AGENT_ROLES, loadProviders, routeSelect } from "./modelroutes.js";
import { app, upsertProject } from "./store.js";
import { shownCounts } from "./notify.js";
import { openDialog } from "./ui.js";

const GROUPS = [
  ["active", ["active", "stopping", "stop_unconfirmed", "paused"]],
  ["archived", ["archived", "complete", "abandoned"]],
  ["trash", ["trashed", "purge_blocked"]],
];
const ROUTE_REASON = "创建项目时选择 (chosen when the project was created)";

export function groupOf(state) {
  return (GROUPS.find(([, states]) => states.includes(state)) || GROUPS[0])[0];
}

export function renderProjects(nav, currentId) {
  const projects = [...app.projects.values()].sort((a, b) => a.id - b.id);
  const nodes = [];
  for (const [group, states] of GROUPS) {
    const inGroup = projects.filter((p) => states.includes(p.state));
    const open = group === "active" || inGroup.some((p) => p.id === currentId);
    const list = h("ul", { class: "project-list" });
    for (const p of inGroup) {
      const current = p.id === currentId;
      list.append(
        h("li", {},
          h("a", {
            href: `#/p/${p.id}`,
            class: ["project-link", current && "current"],
            dataset: { projectId: String(p.id), state: p.state },
            attrs: { "aria-current": current ? "page" : null },
          },
          h("span", { class: "project-name", text: p.name }),
          unreadBadge(p, current),
          p.state !== "active" ? h("span", { class: ["state-badge", `state-${p.state}`], text: label("projectState", p.state) }) : null)),
      );
    }
    if (!inGroup.length) list.append(h("li", { class: "muted empty-group", text: t(`projects.empty.${group}`) }));
    if (group === "trash" && inGroup.length && app.trashRetentionDays) {
      list.append(h("li", { class: "muted empty-group", text: t("projects.trashNote", { days: app.trashRetentionDays }) }));
    }
    const details = h("details", { class: "project-group", dataset: { group }, open },
      h("summary", {}, icon("chevron"), h("span", { text: t(`projects.group.${group}`) }), h("span", { class: "count", text: String(inGroup.length) })),
      list);
    nodes.push(details);
  }
  nav.replaceChildren(...nodes);
}

/** Chat messages by others after my read cursor (the server counts up to 100), and how many of
 * them mention me, apart (pushed by the server: `unread` frames). */
function unreadBadge(project, current) {
  const { unread: n, mentions: m } = shownCounts(project); // under the project's level
  if (project.notify === "none" && !current) return h("span", { class: "muted-mark", attrs: { title: t("notifyLevel.muted"), "aria-label": t("notifyLevel.muted") }, text: "🔕" });
  if (current || n <= 0) return null;
  const count = n > 99 ? "99+" : String(n);
  const label = m ? t("projects.unreadMentions", { n: count, m }) : t("projects.unread", { n: count });
  return h("span", { class: "unread-badges", attrs: { title: label } },
    m ? h("span", { class: "mention-badge", text: `@${m}`, attrs: { "aria-hidden": "true" } }) : null,
    h("span", { class: "unread-badge", text: count, attrs: { "aria-label": label } }));
}


export async function createProjectDialog() {
  try {
    await loadProviders();
  } catch {
    /* the dialog still works; the model lists are then empty */
  }
  return openDialog({
    title: t("create.title"),
    wide: true,
    build: (close) => {
      const name = h("input", { id: "create-name", required: true, maxLength: 80, attrs: { autofocus: true, autocomplete: "off" } });
      const workspace = h("input", { id: "create-workspace", placeholder: "/home/me/projects/app", attrs: { autocomplete: "off", spellcheck: "false" } });
      const goal = h("textarea", { id: "create-goal", rows: 3, maxLength: 8000 });
      const projectModel = routeSelect({ id: "create-project-model", none: t("models.fallback") });
      const rows = AGENT_ROLES.map((role) => memberRow(role));
      const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
      const submit = h("button", { type: "submit", class: "btn btn-primary", text: t("create.submit") });
      const table = h("table", { class: "member-table" },
        h("caption", { class: "visually-hidden", text: t("create.members") }),
        h("thead", {}, h("tr", {}, ...["create.include", "create.role", "create.handle", "create.displayName", "create.model"].map((k) => h("th", { scope: "col", text: t(k) })))),
        h("tbody", {}, rows.map((r) => r.tr)));
      const form = h("form", { class: "form create-form", attrs: { novalidate: true } },
        field(t("create.name"), name),
        field(t("create.workspace"), workspace, t("create.workspaceHint")),
        field(t("create.goal"), goal),
        field(t("create.projectModel"), projectModel, t("create.projectModelHint")),
        h("fieldset", { class: "members-fieldset" }, h("legend", { text: t("create.members") }), h("div", { class: "table-scroll" }, table)),
        error,
        h("div", { class: "dialog-actions" }, h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close() } }), submit));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        error.hidden = true;
        const chosen = rows.filter((r) => r.include.checked);
        const clash = duplicateName(chosen.map((r) => [r.handle.value, r.name.value]));
        const problem = !name.value.trim() ? t("create.needName") : chosen.some((r) => !r.handle.value.trim() || !r.name.value.trim()) ? t("create.needMemberNames") : clash ? t("create.duplicateName", { name: clash }) : null;
        if (problem) {
          error.textContent = problem;
          error.hidden = false;
          return;
        }
        submit.disabled = true;
        try {
          const project = await createProject({
            name: name.value.trim(),
            goal: goal.value.trim(),
            workspace: workspace.value.trim() || null,
            projectModel: projectModel.value || null,
            agents: chosen.map((r) => ({ role: r.role, handle: r.handle.value.trim(), display_name: r.name.value.trim(), model: r.model.value || null })),
          });
          close(project);
        } catch (err) {
          error.textContent = errorText(err);
          error.hidden = false;
        } finally {
          submit.disabled = false;
        }
      });
      return form;
    },
  });
}

/** A name two of the new members (or a member and you, the owner) would both answer to, or
 * null: the server refuses such a project (`name_taken`, `handle_taken`); say so before asking. */
export function duplicateName(members) {
  const key = (s) => s.trim().normalize("NFC").replace(/[A-Z]+/g, (m) => m.toLowerCase());
  const seen = new Map();
  const people = [[app.identity?.handle || "", app.identity?.display_name || ""], ...members];
  for (const [index, names] of people.entries()) {
    for (const name of new Set(names.map((n) => n.trim()).filter(Boolean))) {
      const k = key(name);
      if (seen.has(k) && seen.get(k) !== index) return name;
      seen.set(k, index);
    }
  }
  return null;
}

function memberRow(role) {
  const include = h("input", { type: "checkbox", id: `create-include-${role}`, checked: role === "lead", attrs: { "aria-label": t("create.includeRole", { role: label("role", role) }) } });
  const handle = h("input", { id: `create-handle-${role}`, value: role, maxLength: 32, attrs: { "aria-label": t("create.handleOf", { role: label("role", role) }), spellcheck: "false" } });
  // The default name is the role in the reader's language (in Chinese, the preset's title).
  const name = h("input", { id: `create-display-${role}`, value: label("role", role), maxLength: 64, attrs: { "aria-label": t("create.displayNameOf", { role: label("role", role) }) } });
  const model = routeSelect({ id: `create-model-${role}`, none: t("create.modelDefault"), labelText: t("create.modelOf", { role: label("role", role) }) });
  const sync = () => {
    for (const el of [handle, name, model]) el.disabled = !include.checked;
  };
  include.addEventListener("change", sync);
  sync();
  const tr = h("tr", { dataset: { role } },
    h("td", {}, include),
    h("td", {}, h("label", { htmlFor: `create-include-${role}`, text: label("role", role) })),
    h("td", {}, handle), h("td", {}, name), h("td", {}, model));
  return { role, include, handle, name, model, tr };
}

/** Create, then set the chosen routes (each a versioned, announced change with a reason). */
async function createProject({ name, goal, workspace, projectModel, agents }) {
  const { project } = await post("/api/projects", {
    name,
    goal,
    workspace,
    agents: agents.map(({ role, handle, display_name }) => ({ role, handle, display_name })),
  });
  upsertProject(project);
  const withModel = agents.filter((a) => a.model);
  if (projectModel || withModel.length) {
    const detail = await get(`/api/projects/${project.id}`);
    const byHandle = new Map(detail.members.map((m) => [m.handle.toLowerCase(), m]));
    if (projectModel) await post(`/api/projects/${project.id}/routes`, { scope: "project", target: "", value: projectModel, reason: ROUTE_REASON });
    for (const agent of withModel) {
      const m = byHandle.get(agent.handle.toLowerCase());
      if (m) await post(`/api/projects/${project.id}/routes`, { scope: "member", target: String(m.id), value: agent.model, reason: ROUTE_REASON });
    }
  }
  return project;
}

export function bindProjectsColumn(onCreate) {
  $("#new-project").addEventListener("click", async () => {
    const project = await createProjectDialog();
    if (project) onCreate(project);
  });
}
