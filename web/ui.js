// Shared widgets: modal dialogs (<dialog>: focus stays inside, Esc closes), popup menus
// (role=menu, arrow keys, Esc returns focus), and toasts (a polite live region).

import { $, h, icon } from "./dom.js";
import { errorText, t } from "./i18n.js";

// -- toasts ------------------------------------------------------------------------------------

const MAX_TOASTS = 3;

export function toast(text, { kind = "info", timeout = 5000 } = {}) {
  const region = $("#toasts");
  for (const old of region.children) if (old.textContent === text) old.remove();
  while (region.children.length >= MAX_TOASTS) region.firstElementChild.remove();
  const item = h("div", { class: ["toast", `toast-${kind}`], attrs: { role: kind === "error" ? "alert" : "status" } }, text);
  region.append(item);
  setTimeout(() => item.remove(), timeout);
  return item;
}

export function toastError(err) {
  toast(errorText(err), { kind: "error", timeout: 8000 });
}

// -- dialogs -----------------------------------------------------------------------------------

/**
 * Open a modal dialog. `build(close)` returns the body nodes; `close(value)` resolves the promise.
 * Returns a promise of the value passed to close (undefined when dismissed with Esc or ✕).
 */
export function openDialog({ title, build, wide = false, className = "" }) {
  return new Promise((resolvePromise) => {
    const returnFocus = document.activeElement;
    const titleId = `dlg-${Math.random().toString(36).slice(2, 8)}`;
    const dialog = h("dialog", { class: ["dialog", wide && "dialog-wide", className], attrs: { "aria-labelledby": titleId } });
    let settled = false;
    const close = (value) => {
      if (settled) return;
      settled = true;
      dialog.close();
      dialog.remove();
      if (returnFocus && returnFocus.isConnected) /** @type {HTMLElement} */ (returnFocus).focus();
      resolvePromise(value);
    };
    const head = h(
      "header",
      { class: "dialog-head" },
      h("h2", { id: titleId, text: title }),
      h("button", {
        type: "button",
        class: "icon-btn",
        attrs: { "aria-label": t("common.close"), title: t("common.close") },
        on: { click: () => close(undefined) },
      }, icon("close")),
    );
    const body = h("div", { class: "dialog-body" });
    dialog.append(head, body);
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      close(undefined);
    });
    document.body.append(dialog);
    const content = build(close, dialog);
    for (const node of [content].flat()) if (node) body.append(node);
    dialog.showModal();
    const first = dialog.querySelector("[autofocus]") || body.querySelector("input, select, textarea, button");
    if (first) first.focus();
  });
}

/** A yes/no question; resolves true only when confirmed. */
export function confirmDialog({ title, text, confirmLabel, danger = false }) {
  return openDialog({
    title,
    build: (close) => [
      h("p", { class: "dialog-text", text }),
      h(
        "div",
        { class: "dialog-actions" },
        h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close(false) } }),
        h("button", {
          type: "button",
          class: ["btn", danger ? "btn-danger" : "btn-primary"],
          text: confirmLabel,
          attrs: { autofocus: true },
          on: { click: () => close(true) },
        }),
      ),
    ],
  }).then((value) => value === true);
}

// -- menus -------------------------------------------------------------------------------------

let openMenuState = null;

/**
 * One entry of {@link openMenu}: an item, or "-" for a separator.
 * @typedef {{ id?: string, label: string, run: () => unknown, icon?: string, danger?: boolean,
 *   disabled?: boolean, checked?: boolean, hint?: string } | "-"} MenuEntry
 */

/**
 * A popup menu near `anchor` (an element, or {x, y} for a context menu). Items:
 * {label, run, icon?, danger?, disabled?, checked?, hint?} or "-" for a separator.
 * @param {Element | { x: number, y: number }} anchor
 * @param {MenuEntry[]} items
 * @param {{ label?: string, returnFocus?: Element | null }} [options]
 */
export function openMenu(anchor, items, { label = "", returnFocus = null } = {}) {
  closeMenu();
  const menu = h("div", { class: "menu", attrs: { role: "menu", "aria-label": label } });
  const buttons = [];
  for (const item of items) {
    if (item === "-") {
      menu.append(h("div", { class: "menu-sep", attrs: { role: "separator" } }));
      continue;
    }
    const role = item.checked === undefined ? "menuitem" : "menuitemradio";
    const button = h(
      "button",
      {
        type: "button",
        class: ["menu-item", item.danger && "danger"],
        disabled: Boolean(item.disabled),
        tabIndex: -1,
        dataset: item.id ? { item: item.id } : {},
        attrs: { role, "aria-checked": item.checked === undefined ? null : String(Boolean(item.checked)) },
        on: {
          click: () => {
            closeMenu();
            item.run();
          },
        },
      },
      item.icon ? icon(item.icon) : h("span", { class: "icon-space" }),
      h("span", { class: "menu-label", text: item.label }),
      item.hint ? h("span", { class: "menu-hint", text: item.hint }) : null,
    );
    buttons.push(button);
    menu.append(button);
  }
  menu.addEventListener("keydown", (event) => {
    const enabled = buttons.filter((b) => !b.disabled);
    const index = enabled.indexOf(document.activeElement);
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      const step = event.key === "ArrowDown" ? 1 : -1;
      enabled[(index + step + enabled.length) % enabled.length]?.focus();
    } else if (event.key === "Home" || event.key === "End") {
      event.preventDefault();
      (event.key === "Home" ? enabled[0] : enabled[enabled.length - 1])?.focus();
    } else if (event.key === "Escape") {
      event.preventDefault();
      closeMenu();
    } else if (event.key === "Tab") {
      closeMenu(false);
    }
  });
  document.body.append(menu);
  place(menu, anchor);
  const focusBack = returnFocus || (anchor instanceof Element ? anchor : document.activeElement);
  if (anchor instanceof Element) anchor.setAttribute("aria-expanded", "true");
  openMenuState = { menu, anchor, focusBack };
  (buttons.find((b) => !b.disabled) || menu).focus();
  setTimeout(() => document.addEventListener("pointerdown", outside, true), 0);
  return menu;
}

function outside(event) {
  if (openMenuState && !openMenuState.menu.contains(event.target)) closeMenu(false);
}

export function closeMenu(restoreFocus = true) {
  if (!openMenuState) return;
  const { menu, anchor, focusBack } = openMenuState;
  openMenuState = null;
  document.removeEventListener("pointerdown", outside, true);
  if (anchor instanceof Element) anchor.setAttribute("aria-expanded", "false");
  menu.remove();
  if (restoreFocus && focusBack && focusBack.isConnected) focusBack.focus();
}

function place(menu, anchor) {
  const margin = 8;
  const rect = anchor instanceof Element ? anchor.getBoundingClientRect() : { left: anchor.x, right: anchor.x, top: anchor.y, bottom: anchor.y };
  const width = menu.offsetWidth;
  const height = menu.offsetHeight;
  let left = anchor instanceof Element ? rect.right - width : rect.left;
  if (left < margin) left = Math.min(rect.left, window.innerWidth - width - margin);
  left = Math.max(margin, Math.min(left, window.innerWidth - width - margin));
  let top = rect.bottom + 4;
  if (top + height > window.innerHeight - margin) top = Math.max(margin, rect.top - height - 4);
  menu.style.left = `${left}px`; // CSSOM setters are allowed by the CSP (no inline style attribute)
  menu.style.top = `${top}px`;
}

/** Right-click, long-press (touch) and the context-menu key all open `open(target, point)`. */
export function onContextGesture(root, selector, open) {
  root.addEventListener("contextmenu", (event) => {
    const target = event.target.closest(selector);
    if (!target) return;
    event.preventDefault();
    open(target, event.button === 0 && event.clientX === 0 ? target : { x: event.clientX, y: event.clientY });
  });
  let timer = null;
  root.addEventListener("touchstart", (event) => {
    const target = event.target.closest(selector);
    if (!target) return;
    const touch = event.touches[0];
    timer = setTimeout(() => open(target, { x: touch.clientX, y: touch.clientY }), 550);
  }, { passive: true });
  for (const type of ["touchend", "touchmove", "touchcancel"]) root.addEventListener(type, () => clearTimeout(timer), { passive: true });
  root.addEventListener("keydown", (event) => {
    const target = event.target.closest(selector);
    if (!target) return;
    if (event.key === "ContextMenu" || (event.key === "F10" && event.shiftKey)) {
      event.preventDefault();
      open(target, target);
    }
  });
}
