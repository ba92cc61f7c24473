// The project's workspace (docs/architecture.md "Workspaces"): where it is, whether it is a git
// repository, how members write there (a worktree per task, or one writer at a time and why),
// and for owners a form to change it (`PUT /api/projects/{id}/workspace`; refusals by code). The
// dialog also shows what the agents may do here and the kept worktrees (worksettings.js).

import { get, put } from "./api.js";
import { h, icon } from "./dom.js";
import { errorText, hasString, label, t } from "./i18n.js";
import { field } from "./members.js";
import { isOwner, upsertProject } from "./store.js";
import { openDialog, toast } from "./ui.js";
import { serverSandbox, settingsSection, worktreesSection } from "./worksettings.js";

/** Why a workspace works serially, in the interface language when the code is known. */
function reasonText(ws) {
  const key = `workspaceReason.${ws.reason_code}`;
  return ws.reason_code && hasString(key) ? t(key) : ws.reason || "";
}

export function workspaceFacts(ws) {
  if (!ws || typeof ws !== "object") return h("p", { class: "muted", text: t("workspace.unknown") });
  return h("dl", { class: "facts workspace-facts" },
    h("dt", { text: t("workspace.path") }),
    h("dd", {}, h("code", { class: "workspace-path", text: ws.path }), ws.default ? h("span", { class: "muted", text: ` ${t("workspace.isDefault")}` }) : null),
    h("dt", { text: t("workspace.git") }), h("dd", { class: "workspace-git", text: ws.git ? t("workspace.gitYes") : t("workspace.gitNo") }),
    h("dt", { text: t("workspace.mode") }),
    h("dd", {}, h("span", { class: ["badge", ws.mode === "serial" ? "badge-warn" : "attempt-open"], dataset: { mode: ws.mode }, text: label("workspaceMode", ws.mode) })),
    ws.mode === "serial" && (ws.reason || ws.reason_code) ? [h("dt", { text: t("workspace.reason") }), h("dd", { class: "workspace-reason", text: reasonText(ws) })] : null,
    ws.base ? [h("dt", { text: t("workspace.base") }), h("dd", {}, h("code", { text: ws.base }), ws.head ? h("span", { class: "muted", text: ` ${ws.head}` }) : null)] : null);
}

/** One line at the top of the task list: the workspace folder and mode, network and unsandboxed
 * commands when the project's settings are known and allow them, and a button to the workspace
 * dialog. Nothing when the server has not described the workspace. */
export function workspaceBar(ws, open, settings = null) {
  if (!ws || typeof ws !== "object") return null;
  return h("div", { class: "workspace-bar", dataset: { mode: ws.mode } },
    icon("folder"),
    h("code", { class: "workspace-path", title: ws.path, text: ws.path }),
    h("span", { class: ["badge", ws.mode === "serial" ? "badge-warn" : "attempt-open"], dataset: { mode: ws.mode }, title: ws.mode === "serial" ? reasonText(ws) : "", text: label("workspaceMode", ws.mode) }),
    settings?.network ? h("span", { class: "badge bar-network", title: t("settings.networkOn"), text: t("settings.networkBadge") }) : null,
    settings?.unsandboxed ? h("span", { class: "badge badge-warn bar-unsandboxed", title: t("settings.unsandboxedOn"), text: t("settings.unsandboxedBadge") }) : null,
    h("button", { type: "button", class: "btn btn-small", text: t("workspace.open"), on: { click: open } }));
}

/** The workspace dialog: facts, what agents may do (the project's work settings) and the kept
 * worktrees for everyone; owners change the settings and the workspace. */
export async function openWorkspace(room) {
  let ws = room.project.workspace;
  let settings = room.project.settings;
  let sandbox = null;
  const worktrees = worktreesSection(room);
  try {
    const detail = await get(`/api/projects/${room.id}`);
    if (detail.project) ({ workspace: ws, settings } = upsertProject(detail.project));
    sandbox = serverSandbox(detail.members);
  } catch {
    /* show what the page already has */
  }
  const kept = await worktrees;
  await openDialog({
    title: t("workspace.title", { name: room.project.name }),
    wide: true,
    className: "workspace-dialog",
    build: (close) => {
      const facts = h("div", {}, workspaceFacts(ws));
      const nodes = [facts, settingsSection(room, settings, sandbox), kept];
      if (!isOwner(room)) {
        nodes.push(h("p", { class: "muted", text: t("workspace.ownerOnly") }),
          h("div", { class: "dialog-actions" }, h("button", { type: "button", class: "btn btn-primary", text: t("common.done"), on: { click: () => close() } })));
        return nodes;
      }
      const input = h("input", { id: "workspace-path", value: ws && !ws.default ? ws.path : "", placeholder: "/home/me/projects/app", attrs: { autocomplete: "off", spellcheck: "false" } });
      const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
      const submit = h("button", { type: "submit", class: "btn btn-primary", text: t("workspace.save") });
      const form = h("form", { class: "form workspace-form", attrs: { novalidate: true } },
        h("h3", { text: t("workspace.change") }),
        field(t("workspace.newPath"), input, t("workspace.newHint")),
        error,
        h("div", { class: "dialog-actions" }, h("button", { type: "button", class: "btn", text: t("common.close"), on: { click: () => close() } }), submit));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        error.hidden = true;
        submit.disabled = true;
        try {
          const answer = await put(`/api/projects/${room.id}/workspace`, { path: input.value.trim() || null });
          ws = answer.workspace;
          upsertProject({ id: room.id, workspace: ws });
          facts.replaceChildren(workspaceFacts(ws));
          toast(t("workspace.saved"));
        } catch (err) {
          error.textContent = errorText(err);
          error.dataset.code = err.code;
          error.hidden = false;
        } finally {
          submit.disabled = false;
        }
      });
      nodes.push(form);
      return nodes;
    },
  });
}
