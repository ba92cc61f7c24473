// Layout controls: the projects and panel drawers on narrower screens (the timeline is never
// squeezed), the `Aa` text size (standard / large / extra-large, saved locally) and the language.
// Light and dark follow the system (CSS prefers-color-scheme).

import { $, focusables, local } from "./dom.js";
import { getLang, setLang, t } from "./i18n.js";
import { openMenu } from "./ui.js";

const SIZE_KEY = "room.textSize";
const SIZES = ["standard", "large", "xlarge"];

let openDrawer = null; // {el, button}

export function initLayout() {
  applySize(local.get(SIZE_KEY, "standard"));
  $("#text-size").addEventListener("click", (event) => {
    const current = document.documentElement.dataset.textSize;
    openMenu(event.currentTarget, SIZES.map((size) => ({
      id: size,
      label: t(`size.${size}`),
      checked: size === current,
      run: () => {
        applySize(size);
        local.set(SIZE_KEY, size);
      },
    })), { label: t("size.menu") });
  });
  $("#lang-toggle").addEventListener("click", () => setLang(getLang() === "zh-CN" ? "en" : "zh-CN"));
  bindDrawer($("#open-projects"), $("#projects-col"));
  bindDrawer($("#open-panel"), $("#panel-col"));
  for (const button of document.querySelectorAll("[data-close-drawer]")) button.addEventListener("click", () => closeDrawer());
  $("#scrim").addEventListener("click", () => closeDrawer());
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && openDrawer && !document.querySelector("dialog[open], .menu")) {
      event.preventDefault();
      closeDrawer();
    }
  });
  window.matchMedia("(min-width: 1280px)").addEventListener("change", () => closeDrawer(false));
}

function applySize(size) {
  document.documentElement.dataset.textSize = SIZES.includes(size) ? size : "standard";
}

function bindDrawer(button, el) {
  button.addEventListener("click", () => {
    if (openDrawer?.el === el) closeDrawer();
    else openDrawerOf(el, button);
  });
}

/** Drawers are only drawers below their breakpoint; above it the column is simply there. */
function isDrawer(el) {
  return getComputedStyle(el).position === "fixed";
}

export function openDrawerOf(el, button = null) {
  if (!isDrawer(el)) {
    focusables(el)[0]?.focus();
    return;
  }
  closeDrawer(false);
  openDrawer = { el, button };
  el.classList.add("drawer-open");
  button?.setAttribute("aria-expanded", "true");
  $("#scrim").hidden = false;
  $("#room").inert = true;
  const first = el.querySelector("[aria-selected=true], [aria-current=page]") || focusables(el)[0];
  first?.focus();
}

export function closeDrawer(restoreFocus = true) {
  if (!openDrawer) return;
  const { el, button } = openDrawer;
  openDrawer = null;
  el.classList.remove("drawer-open");
  button?.setAttribute("aria-expanded", "false");
  $("#scrim").hidden = true;
  $("#room").inert = false;
  if (restoreFocus && button && button.offsetParent !== null) button.focus();
}
