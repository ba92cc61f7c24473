// Project lifecycle (docs/lifecycle.md, docs/architecture.md "Lifecycle"): the "…" menu, the state banner, the
// cleanup preview and purge (full name typed and a checkbox). The 停止未确认 state offers retry
// and cancel. What is offered is what the server says this viewer may do (the project's
// `allowed_ops`); the server decides, audits and answers with the new project.

import { get, post } from "./api.js";
import { $, append, clear, h } from "./dom.js";
import { errorText, label, t } from "./i18n.js";
import { isOwner, opsOf, upsertProject } from "./store.js";
import { confirmDialog, openDialog, openMenu, toast, toastError } from "./ui.js";

// The order operations are shown in (which ones: the server's `allowed_ops`). "preview" (the
// cleanup preview) is not an operation: it is shown next to restore and purge, what it previews.
const MENU_ORDER = ["pause", "resume", "retry_stop", "cancel_stop", "restore", "archive", "complete", "abandon", "trash", "preview", "purge"];
const BANNER_ORDER = ["resume", "retry_stop", "cancel_stop", "restore", "purge"];
const BANNER_STATES = new Set(["paused", "stopping", "stop_unconfirmed", "archived", "complete", "abandoned", "trashed", "purge_blocked"]);
// Operations that take a reason (stored, shown in the banner, STATUS.md and the index); complete
// also takes the actual hours.
const REASON_OPS = new Set(["pause", "archive", "complete", "abandon"]);
const DANGER = new Set(["trash", "purge"]);

/** The operations on offer, in `order`. */
function offered(project, order) {
  const ops = new Set(opsOf(project));
  if (ops.has("restore") || ops.has("purge")) ops.add("preview");
  return order.filter((op) => ops.has(op));
}

export class Lifecycle {
  /**
   * `extras(room)`: items other modules add at the top of the menu (发起研究 …).
   * @param {{ onChanged: Function, onPurged: Function, extras?: (room: object) => import("./ui.js").MenuEntry[] }} options
   */
  constructor({ onChanged, onPurged, extras = () => [] }) {
    this.onChanged = onChanged;
    this.extras = extras;
    this.onPurged = onPurged;
    this.room = null;
    this.button = $("#lifecycle-menu");
    this.banner = $("#room-banner");
    this.button.addEventListener("click", () => this.menu());
  }

  open(room) {
    this.room = room;
    this.render();
  }

  render() {
    const room = this.room;
    this.button.hidden = !room;
    if (!room) return;
    const state = room.project.state;
    const shown = BANNER_STATES.has(state);
    this.banner.hidden = !shown;
    this.banner.className = `banner banner-${state}`;
    if (!shown) return;
    const ops = offered(room.project, BANNER_ORDER);
    const text = state === "stop_unconfirmed"
      ? t("banner.stop_unconfirmed", { target: label("projectState", room.project.stop_target || "paused") })
      : t(`banner.${state}`);
    const owner = isOwner(room);
    const reason = room.project.state_reason;
    clear(this.banner);
    append(this.banner, [
      h("span", { class: "banner-text", text }),
      reason ? h("span", { class: "banner-reason", text: t("banner.reason", { reason }) }) : null,
      ...ops.map((op) => h("button", { type: "button", class: ["btn", "btn-small", DANGER.has(op) && "btn-danger"], dataset: { op }, text: t(`lifecycle.${op}`), on: { click: () => this.run(op) } })),
      owner ? null : h("span", { class: "muted", text: t("lifecycle.ownerOnly") }),
    ]);
  }

  menu() {
    const room = this.room;
    if (!room) return;
    const owner = isOwner(room);
    const ops = offered(room.project, MENU_ORDER);
    const items = ops.map((op) => ({ id: op, label: t(`lifecycle.${op}`), danger: DANGER.has(op), run: () => this.run(op) }));
    if (!items.length && owner) items.push({ id: "none", label: t("lifecycle.nothing"), disabled: true, run: () => {} });
    if (!owner) items.push(...(items.length ? ["-"] : []), { id: "owner-only", label: t("lifecycle.ownerOnly"), disabled: true, run: () => {} });
    const extras = this.extras(room);
    openMenu(this.button, [...extras, ...(extras.length && items.length ? ["-"] : []), ...items], { label: t("lifecycle.menu") });
  }

  async run(op) {
    if (op === "preview") return this.preview();
    if (op === "purge") return this.purge();
    const room = this.room;
    let extras = {};
    if (REASON_OPS.has(op)) {
      extras = await reasonDialog(room.project, op);
      if (!extras) return;
    } else if (op === "trash") {
      const ok = await confirmDialog({
        title: t(`lifecycle.confirm.${op}.title`, { name: room.project.name }),
        text: t(`lifecycle.confirm.${op}.text`),
        confirmLabel: t(`lifecycle.${op}`),
        danger: op === "trash",
      });
      if (!ok) return;
    }
    toast(t("lifecycle.working"), { timeout: 2000 });
    try {
      const result = await post(`/api/projects/${room.id}/lifecycle`, { op, ...extras });
      this.apply(result.project);
      const state = result.project.state;
      toast(state === "stop_unconfirmed" ? t("lifecycle.unconfirmed") : t("lifecycle.done", { state: label("projectState", state) }));
    } catch (err) {
      toastError(err);
    }
  }

  apply(project) {
    const merged = upsertProject(project);
    this.onChanged(merged);
  }

  async preview() {
    const room = this.room;
    let data;
    try {
      data = await get(`/api/projects/${room.id}/cleanup-preview`);
    } catch (err) {
      toastError(err);
      return;
    }
    await openDialog({ title: t("lifecycle.previewTitle", { name: room.project.name }), wide: true, build: (close) => [
      previewView(data),
      h("div", { class: "dialog-actions" }, h("button", { type: "button", class: "btn btn-primary", text: t("common.done"), on: { click: () => close() } })),
    ] });
  }

  async purge() {
    const room = this.room;
    const project = room.project;
    let preview = null;
    try {
      preview = await get(`/api/projects/${room.id}/cleanup-preview`);
    } catch {
      preview = null;
    }
    const result = await openDialog({
      title: t("purge.title"),
      wide: true,
      className: "purge-dialog",
      build: (close) => {
        const nameInput = h("input", { id: "purge-name", attrs: { autocomplete: "off", spellcheck: "false" } });
        const check = h("input", { type: "checkbox", id: "purge-confirm" });
        const submit = h("button", { type: "submit", class: "btn btn-danger", disabled: true, text: t("purge.submit") });
        const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
        // Exactly the full name: no trimming or case folding (the server checks the same way).
        const update = () => {
          submit.disabled = !(nameInput.value === project.name && check.checked);
        };
        nameInput.addEventListener("input", update);
        check.addEventListener("change", update);
        const form = h("form", { class: "form" },
          h("p", { class: "dialog-text", text: t("purge.explain") }),
          preview ? previewView(preview) : null,
          h("label", { class: "field" },
            h("span", { class: "field-label" }, t("purge.typeName"), " ", h("strong", { class: "purge-name", text: project.name })),
            nameInput),
          h("label", { class: "check" }, check, h("span", { text: t("purge.checkbox") })),
          error,
          h("div", { class: "dialog-actions" }, h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close() } }), submit));
        form.addEventListener("submit", async (event) => {
          event.preventDefault();
          if (submit.disabled) return;
          submit.disabled = true;
          try {
            const answer = await post(`/api/projects/${room.id}/purge`, { confirm_name: nameInput.value, confirmed: check.checked });
            close(answer || {});
          } catch (err) {
            error.textContent = err.status === 500 ? t("purge.blocked") : errorText(err);
            error.hidden = false;
            update();
          }
        });
        return form;
      },
    });
    if (result) {
      toast(t("purge.done", { name: project.name }));
      this.onPurged(project.id);
    }
  }
}

/** Ask for the reason (and, for complete, the actual hours); undefined when cancelled. */
function reasonDialog(project, op) {
  return openDialog({
    title: t(`lifecycle.confirm.${op}.title`, { name: project.name }),
    className: "reason-dialog",
    build: (close) => {
      const reason = h("textarea", { id: "lifecycle-reason", rows: 2, maxLength: 500 });
      const hours = op === "complete" ? h("input", { id: "lifecycle-hours", type: "number", min: "0", step: "0.5", attrs: { inputmode: "decimal" } }) : null;
      const unknown = hours ? h("input", { id: "lifecycle-hours-unknown", type: "checkbox" }) : null;
      const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
      const form = h("form", { class: "form" },
        h("p", { class: "dialog-text", text: t(`lifecycle.confirm.${op}.text`) }),
        h("label", { class: "field" }, h("span", { class: "field-label", text: t("lifecycle.reason") }), reason),
        hours ? h("label", { class: "field" }, h("span", { class: "field-label", text: t("lifecycle.actualHours") + " *" }), hours) : null,
        unknown ? h("label", { class: "check" }, unknown, h("span", { text: t("lifecycle.hoursUnknown") })) : null,
        error,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close() } }),
          h("button", { type: "submit", class: ["btn", op === "abandon" ? "btn-danger" : "btn-primary"], text: t(`lifecycle.${op}`).replace(/…$/, "") })));
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const extras = {};
        if (reason.value.trim()) extras.reason = reason.value.trim();
        if (hours && hours.value !== "") {
          const value = Number(hours.value);
          if (!Number.isFinite(value) || value < 0) {
            error.textContent = t("lifecycle.actualHours");
            error.hidden = false;
            return;
          }
          extras.actual_hours = value;
        } else if (unknown?.checked) {
          extras.actual_hours = "unknown";
        } else if (hours) {
          // Completing records the actual hours (the estimates rule reads them) or says unknown.
          error.textContent = t("lifecycle.hoursNeeded");
          error.hidden = false;
          return;
        }
        close(extras);
      });
      return form;
    },
  });
}

function previewView(data) {
  const deleted = (data.delete || []).map((item) => {
    const counts = item.counts ? Object.entries(item.counts).filter(([, n]) => n).map(([k, n]) => `${label("purgeCount", k)} ${n}`).join("、") : "";
    const count = item.count !== undefined ? String(item.count) : counts || "0";
    return h("li", {}, h("span", { text: label("purgeStep", item.step || item.what) }), h("span", { class: "muted", text: ` — ${count}` }));
  });
  const kept = (data.keep || []).map((item) => h("li", {}, h("span", { text: label("purgeKeep", item.what) }), item.path ? h("code", { text: ` ${item.path}` }) : null));
  return h("div", { class: "cleanup-preview" },
    h("h3", { text: t("purge.willDelete") }), h("ul", { class: "preview-delete" }, deleted),
    h("h3", { text: t("purge.willKeep") }), h("ul", { class: "preview-keep" }, kept));
}
