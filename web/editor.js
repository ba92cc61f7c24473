// Editing one's own message in place: Enter saves (never during IME composition), Esc cancels.
// The server keeps the old text in the message's edit history.

import { h } from "./dom.js";
import { errorText, t } from "./i18n.js";
import { isComposing, isSubmitKey, trackComposition } from "./ime.js";

export function startEdit(el, message, conn, room, done) {
  if (el.classList.contains("editing")) return;
  el.classList.add("editing");
  const body = el.querySelector(".msg-body");
  const input = h("textarea", {
    class: "edit-input",
    value: message.body,
    rows: Math.min(8, message.body.split("\n").length + 1),
    attrs: { "aria-label": t("edit.label") },
  });
  const error = h("div", { class: "edit-error", attrs: { role: "alert" }, hidden: true });
  const plain = h("button", { type: "button", class: "btn btn-small", hidden: true, text: t("edit.savePlain"), on: { click: () => save(true) } });
  const cancelBtn = h("button", { type: "button", class: "btn btn-small", text: t("common.cancel"), on: { click: () => finish() } });
  const saveBtn = h("button", { type: "button", class: "btn btn-small btn-primary", text: t("common.save"), on: { click: () => save(false) } });
  body.replaceChildren(input, error, h("div", { class: "edit-actions" }, h("span", { class: "edit-hint", text: t("edit.hint") }), plain, cancelBtn, saveBtn));
  const ime = trackComposition(input);
  input.addEventListener("keydown", (event) => {
    if (isSubmitKey(event, ime)) {
      event.preventDefault();
      save(false);
    } else if (event.key === "Escape" && !isComposing(event, ime)) {
      event.preventDefault();
      event.stopPropagation();
      finish();
    }
  });
  input.focus();
  input.setSelectionRange(input.value.length, input.value.length);

  let busy = false;
  async function save(asPlainText) {
    if (busy) return;
    const text = input.value;
    if (text === message.body || !text.trim()) {
      finish();
      return;
    }
    busy = true;
    saveBtn.disabled = true;
    try {
      await conn.request({ type: "edit", project_id: room.id, message_id: message.id, body: text, as_plain_text: asPlainText });
      finish();
    } catch (err) {
      error.hidden = false;
      if (err.code === "mentions_unresolved") {
        error.textContent = (err.details?.diagnostics || []).map((d) => d.hint).join("；") || errorText(err);
        plain.hidden = false;
      } else {
        error.textContent = errorText(err);
      }
    } finally {
      busy = false;
      saveBtn.disabled = false;
    }
  }

  function finish() {
    el.classList.remove("editing");
    done();
  }
}
