// What a person may do on a task card: start, submit, review (a verdict and its grounds per
// criterion: all passed accepts the task, any failed sends it back), accept, the "已同步" receipt
// after a requirement change, unblock, block, reassign, cancel, reopen; and the acceptance
// progress. The server says which events the task's state allows and who may ask for each
// (`event_rules`, docs/tasks.md "Shapes"); a button is offered to a person who holds one of those
// roles here, and the server still decides (its refusal is shown, translated).

import { post } from "./api.js";
import { h } from "./dom.js";
import { errorText, t } from "./i18n.js";
import { field } from "./members.js";
import { mayPost } from "./store.js";
import { openDialog } from "./ui.js";

// The order of the buttons on a card, and how each is asked for.
const ACTIONS = [
  ["start", "direct"],
  ["sync_receipt", "direct"],
  ["unblock", "direct"],
  ["submit", "submit"],
  ["review", "review"],
  ["accept", "direct"],
  ["reassign", "reassign"],
  ["block", "reason"],
  ["reopen", "reason"],
  ["cancel", "reason"],
];

/** This person's roles on `task` (docs/tasks.md "Who may trigger what"). */
function rolesOf(room, task) {
  const roles = new Set(["human"]);
  if (task.owner_id === room.you) roles.add("owner");
  if (task.reviewer_id === room.you) roles.add("reviewer");
  return roles;
}

/** The events this person is offered on `task`, in button order. `review` stands for the
 * per-criterion review (the server's `review`, which requests changes or accepts); `accept`
 * alone is offered once every criterion passed on this revision. */
export function offeredEvents(room, task) {
  if (!room.you || !mayPost(room.project)) return [];
  const roles = rolesOf(room, task);
  const rules = task.event_rules || {};
  const may = (event) => Boolean(rules[event]?.who.some((who) => roles.has(who)));
  return ACTIONS.map(([event]) => event).filter((event) => {
    if (event === "review") return may("request_changes") && (task.criteria || []).length > 0;
    if (event === "accept") return may("accept") && (task.missing || []).length === 0;
    return may(event);
  });
}

/** "计划优先": a plan is saved and waits for a person to start it (the notice says so and
 * points here): a bar with the button, or null. */
export function planStartBar(room, tasks, reload) {
  if (!room.you || !mayPost(room.project) || !tasks.some((task) => task.held)) return null;
  const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
  const button = h("button", { type: "button", class: "btn btn-small btn-primary", dataset: { action: "plan-start" }, text: t("tasks.startPlan"), on: { click: async () => {
    button.disabled = true;
    error.hidden = true;
    try {
      await post(`/api/projects/${room.id}/plan/start`, {});
      reload();
    } catch (err) {
      error.textContent = errorText(err);
      error.hidden = false;
    } finally {
      button.disabled = false;
    }
  } } });
  return h("div", { class: "plan-start-bar" }, h("span", { text: t("tasks.planWaiting") }), button, error);
}

/** The progress of acceptance on this revision: a bar and "验收进度 n/m", or null. */
export function acceptanceProgress(task) {
  const criteria = task.criteria || [];
  if (!criteria.length) return null;
  const passed = criteria.filter((c) => c.passed === true).length;
  const text = t("tasks.progress", { passed, total: criteria.length });
  return h("div", { class: "task-progress", dataset: { passed: String(passed), total: String(criteria.length) } },
    h("progress", { max: criteria.length, value: passed, attrs: { "aria-label": text } }),
    h("span", { class: "muted", text }));
}

/** The card's action buttons, or null. `reload` refetches the board after a change. */
export function taskActions(room, task, reload) {
  const events = offeredEvents(room, task);
  if (!events.length) return null;
  const how = Object.fromEntries(ACTIONS);
  const error = h("p", { class: "error-text task-action-error", attrs: { role: "alert" }, hidden: true });
  const buttons = events.map((event) => h("button", {
    type: "button",
    class: ["btn", "btn-small", ["start", "accept", "sync_receipt", "review"].includes(event) && "btn-primary"],
    dataset: { taskAction: event },
    text: t(`taskAction.${event}`),
    on: { click: async (clickEvent) => {
      const button = clickEvent.currentTarget;
      error.hidden = true;
      if (how[event] !== "direct") {
        if (await ACTION_DIALOGS[how[event]](room, task, event)) reload();
        return;
      }
      button.disabled = true;
      try {
        await send(room, task, event, {});
        reload();
      } catch (err) {
        error.textContent = errorText(err);
        error.dataset.code = err.code;
        error.hidden = false;
      } finally {
        button.disabled = false;
      }
    } },
  }));
  return h("div", { class: "task-actions" }, h("div", { class: "task-action-buttons" }, buttons), error);
}

function send(room, task, event, body) {
  const path = event === "sync_receipt" ? "sync-receipt" : event;
  return post(`/api/projects/${room.id}/tasks/${encodeURIComponent(task.key)}/${path}`, body);
}

/**
 * A dialog whose form posts `event`; `build(form)` returns the fields and `bodyOf()` the
 * request (or a string: what is missing). Resolves true when the server took it.
 * @param {object} room
 * @param {object} task
 * @param {string} event
 * @param {{ title: string, fields: Node[], bodyOf: () => object | string, submitText?: string }} options
 */
function actionDialog(room, task, event, { title, fields, bodyOf, submitText }) {
  return openDialog({
    title,
    build: (close) => {
      const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
      const submit = h("button", { type: "submit", class: "btn btn-primary", text: submitText || t(`taskAction.${event}`) });
      const form = h("form", { class: "form task-action-form", dataset: { event }, attrs: { novalidate: true } },
        ...fields,
        error,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close(false) } }), submit));
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        error.hidden = true;
        const body = bodyOf();
        if (typeof body === "string") {
          error.textContent = body;
          error.hidden = false;
          return;
        }
        submit.disabled = true;
        try {
          await send(room, task, event, body);
          close(true);
        } catch (err) {
          error.textContent = errorText(err);
          error.dataset.code = err.code;
          error.hidden = false;
        } finally {
          submit.disabled = false;
        }
      });
      return form;
    },
  }).then(Boolean);
}

const ACTION_DIALOGS = {
  reason(room, task, event) {
    const reason = h("textarea", { rows: 3, maxLength: 2000, required: true });
    return actionDialog(room, task, event, {
      title: t("taskDialog.title", { action: t(`taskAction.${event}`), key: task.key }),
      fields: [field(t("taskDialog.reason"), reason)],
      bodyOf: () => (reason.value.trim() ? { reason: reason.value.trim() } : t("taskDialog.needReason")),
    });
  },

  submit(room, task, event) {
    const summary = h("textarea", { rows: 3, maxLength: 2000, required: true });
    const files = h("textarea", { rows: 3, attrs: { spellcheck: "false", placeholder: "src/app.py" } });
    return actionDialog(room, task, event, {
      title: t("taskDialog.title", { action: t("taskAction.submit"), key: task.key }),
      fields: [field(t("taskDialog.summary"), summary), field(t("taskDialog.files"), files, t("taskDialog.filesHint"))],
      bodyOf: () => {
        const artifacts = files.value.split("\n").map((line) => line.trim()).filter(Boolean);
        if (!summary.value.trim()) return t("taskDialog.needSummary");
        return { summary: summary.value.trim(), artifacts };
      },
    });
  },

  reassign(room, task, event) {
    const candidates = [...room.members.values()].filter((m) => m.status === "active" && m.id !== task.owner_id);
    const owner = h("select", { required: true },
      candidates.map((m) => h("option", { value: m.handle, text: `${m.display_name}（@${m.handle}）` })));
    return actionDialog(room, task, event, {
      title: t("taskDialog.title", { action: t("taskAction.reassign"), key: task.key }),
      fields: [field(t("taskDialog.newOwner"), owner)],
      bodyOf: () => (owner.value ? { owner: owner.value } : t("taskDialog.needOwner")),
    });
  },

  review(room, task) {
    const rows = (task.criteria || []).map((c) => {
      const name = `verdict-${c.n}`;
      const radio = (value, text) => h("label", { class: "check" },
        h("input", { type: "radio", name, value, checked: value === "pass" && c.passed === true }), h("span", { text }));
      const grounds = h("textarea", { rows: 2, maxLength: 2000, attrs: { "aria-label": t("taskDialog.groundsOf", { n: c.n }) } });
      const box = h("fieldset", { class: "verdict", dataset: { n: String(c.n) } },
        h("legend", { text: `${c.n}. ${c.text}` }),
        h("div", { class: "verdict-choice" }, radio("pass", t("taskDialog.pass")), radio("fail", t("taskDialog.fail"))),
        field(t("taskDialog.grounds"), grounds));
      return { c, box, grounds, choice: () => box.querySelector(`input[name=${name}]:checked`)?.value };
    });
    return actionDialog(room, task, "review", {
      title: t("taskDialog.reviewTitle", { key: task.key, revision: task.revision }),
      submitText: t("taskDialog.reviewSubmit"),
      fields: [h("p", { class: "dialog-text", text: t("taskDialog.reviewHint") }), ...rows.map((r) => r.box)],
      bodyOf: () => {
        // Every criterion judged: acceptance needs all of them on this revision.
        if (rows.some((r) => !r.choice() || !r.grounds.value.trim())) return t("taskDialog.needVerdicts");
        return { results: rows.map((r) => ({ criterion: r.c.n, passed: r.choice() === "pass", evidence: r.grounds.value.trim() })) };
      },
    });
  },
};
