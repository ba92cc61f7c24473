// Tasks by hand (docs/tasks.md "Tasks by hand"): the 新建任务 / 看板 bar atop the task list, the
// task form (create and edit: title, acceptance, owner, dependencies, dates) with each refusal
// shown under the field it concerns, moving a card up or down the list, and the board: a column
// per task state where dropping a card in another column asks the server for the move
// (`POST …/tasks/{key}/move`), dropping it on a card of its own column (or its ↑ ↓ buttons, the
// keyboard's way) asks for the new order (`PUT …/tasks/order`), and a refusal is shown in words.
// The server decides everything; nothing here copies its rules.

import { get, patch, post, put } from "./api.js";
import { h } from "./dom.js";
import { errorText, getLang, label, t } from "./i18n.js";
import { isOwner, mayPost } from "./store.js";
import { openDialog } from "./ui.js";

/** The board's columns, in the order work flows (the server's task states). */
export const BOARD_STATES = ["waiting", "ready", "in_progress", "blocked", "in_review", "changes_requested", "needs_sync", "handoff", "accepted", "cancelled"];

/** A server message "中文 (English)" in the interface language. */
function inLang(message) {
  return errorText({ message });
}

/** The bar above the list: 新建任务 and 看板, or null for a viewer who may not post. */
export function taskToolbar(room, tasks, reload) {
  if (!room.you || !mayPost(room.project)) return null;
  return h("div", { class: "task-toolbar" },
    h("button", { type: "button", class: "btn btn-small btn-primary", dataset: { action: "task-new" }, text: t("taskForm.new"),
      on: { click: async () => (await openTaskForm(room, tasks, null)) && reload() } }),
    h("button", { type: "button", class: "btn btn-small", dataset: { action: "task-board" }, text: t("board.open"),
      on: { click: async () => {
        await openBoard(room);
        reload();
      } } }));
}

/** "预计 2026-12-01 → 2026-12-05" on a card with estimated dates, or null. */
export function taskDates(task) {
  if (!task.est_start && !task.est_end) return null;
  return h("p", { class: "task-dates muted", text: t("taskForm.dates", { start: task.est_start || "—", end: task.est_end || "—" }) });
}

/** 编辑 and ↑ ↓ on a list card, or null. */
export function taskEditControls(room, task, tasks, reload) {
  if (!room.you || !mayPost(room.project)) return null;
  const index = tasks.findIndex((other) => other.key === task.key);
  const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
  const move = async (delta) => {
    const keys = tasks.map((other) => other.key);
    const [key] = keys.splice(index, 1);
    keys.splice(index + delta, 0, key);
    try {
      await put(`/api/projects/${room.id}/tasks/order`, { keys });
      reload();
    } catch (err) {
      error.textContent = errorText(err);
      error.hidden = false;
    }
  };
  return h("div", { class: "task-edit-controls" },
    h("button", { type: "button", class: "btn btn-small btn-ghost", dataset: { action: "task-edit" }, text: t("taskForm.edit"),
      on: { click: async () => (await openTaskForm(room, tasks, task)) && reload() } }),
    h("button", { type: "button", class: "btn btn-small btn-ghost", dataset: { action: "task-up" }, disabled: index <= 0,
      attrs: { "aria-label": t("taskForm.up", { key: task.key }), title: t("taskForm.up", { key: task.key }) }, text: "↑", on: { click: () => move(-1) } }),
    h("button", { type: "button", class: "btn btn-small btn-ghost", dataset: { action: "task-down" }, disabled: index < 0 || index >= tasks.length - 1,
      attrs: { "aria-label": t("taskForm.down", { key: task.key }), title: t("taskForm.down", { key: task.key }) }, text: "↓", on: { click: () => move(1) } }),
    error);
}

/**
 * The task form: a new task (`task` null) or an edit. Resolves true when the server took it.
 * Only the fields that changed are sent; each problem the server lists is shown under its field.
 * @param {object} room
 * @param {object[]} tasks the board, for the dependency choices
 * @param {object | null} task
 */
export function openTaskForm(room, tasks, task) {
  const owners = [...room.members.values()].filter((m) => m.status === "active");
  const mayDate = isOwner(room);
  return openDialog({
    title: task ? t("taskForm.editTitle", { key: task.key }) : t("taskForm.newTitle"),
    wide: true,
    build: (close) => {
      const errors = {};
      const slot = (name) => (errors[name] = h("p", { class: "error-text field-error", dataset: { errorFor: name }, attrs: { role: "alert" }, hidden: true }));
      const row = (name, text, control, hint = null) => h("div", { class: "field", dataset: { field: name } },
        h("label", { class: "field-label", text, attrs: { for: control.id } }), control,
        hint ? h("span", { class: "field-hint", text: hint }) : null, slot(name));
      const key = h("input", { id: "task-form-key", name: "key", maxLength: 40, attrs: { spellcheck: "false", placeholder: "api" } });
      const title = h("input", { id: "task-form-title", name: "title", maxLength: 200, value: task?.title || "", required: true });
      const owner = h("select", { id: "task-form-owner", name: "owner" },
        owners.map((m) => h("option", { value: m.handle, text: `${m.display_name}（@${m.handle}）`, selected: task ? m.id === task.owner_id : m.id === room.you })));
      const acceptance = h("textarea", { id: "task-form-acceptance", name: "acceptance", rows: 3, value: (task?.criteria || []).map((c) => c.text).join("\n") });
      const others = tasks.filter((other) => !task || other.key !== task.key);
      const deps = h("div", { id: "task-form-deps", class: "dep-choices", attrs: { role: "group" } },
        others.length ? others.map((other) => h("label", { class: "check" },
          h("input", { type: "checkbox", name: "depends_on", value: other.key, checked: Boolean(task?.depends_on?.includes(other.key)) }),
          h("span", { text: `${other.key} — ${other.title}` }))) : h("span", { class: "muted", text: t("taskForm.noOthers") }));
      const start = h("input", { id: "task-form-start", name: "est_start", type: "date", value: task?.est_start || "", disabled: !mayDate });
      const end = h("input", { id: "task-form-end", name: "est_end", type: "date", value: task?.est_end || "", disabled: !mayDate });
      const general = slot("_");
      const submit = h("button", { type: "submit", class: "btn btn-primary", text: task ? t("taskForm.save") : t("taskForm.create") });
      const form = h("form", { class: "form task-form", attrs: { novalidate: true } },
        task ? null : row("key", t("taskForm.key"), key, t("taskForm.keyHint")),
        row("title", t("taskForm.title"), title),
        row("owner", t("taskForm.owner"), owner),
        row("acceptance", t("taskForm.acceptance"), acceptance, t("taskForm.acceptanceHint")),
        row("depends_on", t("taskForm.dependsOn"), deps),
        h("div", { class: "task-form-dates" },
          row("est_start", t("taskForm.start"), start), row("est_end", t("taskForm.end"), end)),
        mayDate ? null : h("p", { class: "field-hint", text: t("taskForm.datesOwners") }),
        general,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close(false) } }), submit));
      const chosenDeps = () => [...deps.querySelectorAll("input:checked")].map((box) => /** @type {HTMLInputElement} */ (box).value);
      const lines = () => acceptance.value.split("\n").map((line) => line.trim()).filter(Boolean);
      const bodyOf = () => {
        const full = { title: title.value, owner: owner.value, acceptance: lines(), depends_on: chosenDeps() };
        if (mayDate && (start.value || end.value)) Object.assign(full, { est_start: start.value || null, est_end: end.value || null });
        if (!task) return key.value.trim() ? { key: key.value.trim(), ...full } : full;
        const was = { title: task.title, owner: task.owner?.handle, acceptance: (task.criteria || []).map((c) => c.text), depends_on: task.depends_on || [] };
        const changed = {};
        for (const name of Object.keys(was)) {
          if (JSON.stringify(name === "depends_on" ? [...full[name]].sort() : full[name]) !== JSON.stringify(name === "depends_on" ? [...was[name]].sort() : was[name])) changed[name] = full[name];
        }
        if (mayDate && ((start.value || null) !== (task.est_start || null) || (end.value || null) !== (task.est_end || null))) {
          Object.assign(changed, { est_start: start.value || null, est_end: end.value || null });
        }
        return changed;
      };
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        for (const box of Object.values(errors)) box.hidden = true;
        const body = bodyOf();
        if (task && !Object.keys(body).length) return close(false);
        submit.disabled = true;
        try {
          if (task) await patch(`/api/projects/${room.id}/tasks/${encodeURIComponent(task.key)}`, body);
          else await post(`/api/projects/${room.id}/tasks`, body);
          close(true);
        } catch (err) {
          showProblems(err, errors);
        } finally {
          submit.disabled = false;
        }
      });
      return form;
    },
  }).then(Boolean);
}

/** Each problem of a refused plan item or edit under its field; the rest in the general slot. */
function showProblems(err, errors) {
  const problems = err.details?.problems;
  const texts = {};
  if (Array.isArray(problems)) {
    for (const p of problems) {
      const name = p.field && errors[p.field] ? p.field : "_";
      // A plan item's problem names the item ("条目 #1 …"), meaningless in a form of one: its
      // hint says what to do. An edit's problem speaks of the field itself.
      (texts[name] ||= []).push(inLang("item" in p ? p.hint : p.message));
    }
  } else {
    const name = err.details?.field && errors[err.details.field] ? err.details.field : "_";
    texts[name] = [errorText(err)];
  }
  for (const [name, list] of Object.entries(texts)) {
    errors[name].textContent = list.join(getLang() === "en" ? "; " : "；");
    errors[name].hidden = false;
  }
  const first = Object.keys(texts)[0];
  errors[first]?.closest(".field")?.querySelector("input, select, textarea")?.focus();
}

// -- the board ------------------------------------------------------------------------------------

/** Why a move was refused, in words: the columns it can go to for `invalid_task_move`. */
function refusalText(err, task, to) {
  if (err.code === "invalid_task_move") {
    const reachable = (err.details?.reachable || []).map((s) => label("taskState", s));
    return t("board.cannotMove", {
      key: task.key,
      from: label("taskState", err.details?.state || task.state),
      to: label("taskState", err.details?.to),
      reachable: reachable.join(getLang() === "en" ? ", " : "、") || t("board.nowhere"),
    });
  }
  if (err.code === "note_required") return t("board.needReason", { key: task.key, to: label("taskState", to) });
  return t("board.refused", { key: task.key, why: errorText(err) });
}

/** Why a new order was refused, in words: for `bad_order`, the cards the board did not know of
 * (someone added or removed a task since it loaded) or had twice. */
function reorderRefusalText(err, task) {
  const d = err.details || {};
  const sep = getLang() === "en" ? ", " : "、";
  const parts = [errorText(err)];
  if (err.code === "bad_order") {
    if (d.missing?.length) parts.push(t("board.orderMissing", { keys: d.missing.join(sep) }));
    if (d.unknown?.length) parts.push(t("board.orderUnknown", { keys: d.unknown.join(sep) }));
    if (d.repeated?.length) parts.push(t("board.orderRepeated", { keys: d.repeated.join(sep) }));
  }
  return t("board.notReordered", { key: task.key, why: parts.join(getLang() === "en" ? "; " : "；") });
}

/**
 * The project's keys with `key` moved within its column to `target`'s place (after it when
 * moving down, before it when moving up), or to the end of the column when `target` is null.
 * @param {{key: string, state: string}[]} tasks the board, in its order
 * @param {string} key
 * @param {string | null} target
 */
export function reorderedKeys(tasks, key, target) {
  const keys = tasks.map((task) => task.key);
  const from = keys.indexOf(key);
  if (from < 0 || key === target) return keys;
  // The place to take, in the old order: the target's, or the column's last card's.
  const to = target === null ? tasks.map((task) => task.state).lastIndexOf(tasks[from].state) : keys.indexOf(target);
  if (to < 0) return keys;
  keys.splice(from, 1);
  keys.splice(to, 0, key); // moving down: after the target (it shifted up); up: before it
  return keys;
}

/** The board in a wide dialog: a column per state; resolves when it is closed. */
export function openBoard(room) {
  return openDialog({
    title: t("board.title"),
    wide: true,
    className: "board-dialog",
    build: () => {
      const status = h("div", { class: "board-status", attrs: { role: "status", "aria-live": "polite" } });
      const columns = h("div", { class: "board-columns" });
      const root = h("div", { class: "board" }, h("p", { class: "muted board-hint", text: t("board.hint") }), status, columns);
      let tasks = [];
      let dragged = null; // the card being dragged (dataTransfer is unreadable before the drop)
      const render = () => {
        columns.replaceChildren(...BOARD_STATES.map((state) => column(state)));
      };
      const load = async () => {
        try {
          tasks = (await get(`/api/projects/${room.id}/tasks`)).tasks || [];
          render();
        } catch (err) {
          say(errorText(err), "error");
        }
      };
      const say = (text, kind, extra = null) => {
        const line = h("p", { class: kind === "error" ? "error-text board-refusal" : "board-ok", dataset: { kind }, text });
        status.replaceChildren(...(extra ? [line, extra] : [line]));
      };
      const move = async (task, to, reason = null) => {
        if (to === task.state) return;
        const body = reason ? { to, reason } : { to };
        try {
          await post(`/api/projects/${room.id}/tasks/${encodeURIComponent(task.key)}/move`, body);
          say(t("board.moved", { key: task.key, to: label("taskState", to) }), "ok");
          await load();
        } catch (err) {
          say(refusalText(err, task, to), "error", err.code === "note_required" && err.details?.note === "reason" ? reasonForm(task, to) : null);
        }
      };
      const reorder = async (task, target, focus = null) => {
        const keys = reorderedKeys(tasks, task.key, target);
        if (keys.every((key, i) => key === tasks[i].key)) return;
        try {
          await put(`/api/projects/${room.id}/tasks/order`, { keys });
          await load();
          const column = tasks.filter((other) => other.state === task.state).map((other) => other.key);
          say(t("board.reordered", { key: task.key, n: column.indexOf(task.key) + 1, of: column.length, state: label("taskState", task.state) }), "ok");
          // The keyboard's way: focus stays on the card that moved (its other arrow at an end).
          if (focus) {
            const steps = [...columns.querySelectorAll(`.board-card[data-key="${CSS.escape(task.key)}"] .board-step`)];
            const button = /** @type {HTMLButtonElement | undefined} */ (steps.find((b) => b instanceof HTMLButtonElement && b.dataset.action === focus && !b.disabled) || steps.find((b) => b instanceof HTMLButtonElement && !b.disabled));
            button?.focus();
          }
        } catch (err) {
          say(reorderRefusalText(err, task), "error");
          await load(); // the order the server has, for the next try
        }
      };
      const reasonForm = (task, to) => {
        const input = h("input", { class: "board-reason", maxLength: 2000, attrs: { "aria-label": t("taskDialog.reason"), placeholder: t("taskDialog.reason") } });
        const form = h("form", { class: "board-reason-form" }, input,
          h("button", { type: "submit", class: "btn btn-small btn-primary", text: t("board.moveWithReason", { to: label("taskState", to) }) }));
        form.addEventListener("submit", (e) => {
          e.preventDefault();
          if (input.value.trim()) move(task, to, input.value.trim());
        });
        queueMicrotask(() => input.focus());
        return form;
      };
      const column = (state) => {
        const list = tasks.filter((task) => task.state === state);
        const col = h("section", { class: ["board-column", `board-${state}`], dataset: { state }, attrs: { "aria-label": label("taskState", state) } },
          h("h3", { class: "board-column-head" },
            h("span", { class: ["state-badge", `state-${state}`], text: label("taskState", state) }),
            h("span", { class: "muted", text: String(list.length) })),
          h("div", { class: "board-cards" }, list.map((task) => card(task))));
        col.addEventListener("dragover", (e) => {
          e.preventDefault();
          col.classList.add("drop-target");
        });
        col.addEventListener("dragleave", () => col.classList.remove("drop-target"));
        col.addEventListener("drop", (e) => {
          e.preventDefault();
          col.classList.remove("drop-target");
          const task = dragged;
          dragged = null;
          if (!task) return;
          if (task.state !== state) return move(task, state);
          // Within its own column: onto a card takes that card's place; elsewhere, the end.
          const onto = /** @type {Element} */ (e.target).closest?.(".board-card");
          reorder(task, onto instanceof HTMLElement ? onto.dataset.key || null : null);
        });
        return col;
      };
      const card = (task) => {
        const select = h("select", { class: "board-move", attrs: { "aria-label": t("board.moveTo", { key: task.key }) } },
          BOARD_STATES.map((s) => h("option", { value: s, text: label("taskState", s), selected: s === task.state })));
        select.addEventListener("change", () => move(task, select.value));
        const inColumn = tasks.filter((other) => other.state === task.state);
        const at = inColumn.indexOf(task);
        const step = (delta) => h("button", {
          type: "button", class: "btn btn-small btn-ghost board-step", dataset: { action: delta < 0 ? "board-up" : "board-down" },
          disabled: delta < 0 ? at <= 0 : at >= inColumn.length - 1,
          attrs: { "aria-label": t(delta < 0 ? "taskForm.up" : "taskForm.down", { key: task.key }), title: t(delta < 0 ? "taskForm.up" : "taskForm.down", { key: task.key }) },
          text: delta < 0 ? "↑" : "↓",
          on: { click: () => reorder(task, inColumn[at + delta].key, delta < 0 ? "board-up" : "board-down") },
        });
        const el = h("article", { class: "board-card", draggable: true, dataset: { key: task.key, state: task.state } },
          h("div", { class: "board-card-head" }, h("span", { class: "task-key", text: task.key }),
            inColumn.length > 1 ? h("span", { class: "board-steps" }, step(-1), step(1)) : null),
          h("p", { class: "board-card-title", text: task.title }),
          h("p", { class: "muted board-card-owner", text: task.owner?.display_name || "" }),
          select);
        el.addEventListener("dragstart", (e) => {
          e.dataTransfer?.setData("text/plain", task.key);
          dragged = task;
          el.classList.add("dragging");
        });
        el.addEventListener("dragend", () => {
          el.classList.remove("dragging");
          dragged = null;
        });
        return el;
      };
      load();
      return root;
    },
  });
}
