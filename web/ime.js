// Enter sends, Shift+Enter adds a line, and Enter during IME composition never sends: Chinese
// input confirms a candidate with Enter. Browsers mark that keydown with `isComposing` (and
// Safari/older Chrome with keyCode 229); we also track composition events ourselves, because
// some IMEs send the confirming keydown after `compositionend` in the same task.

export function trackComposition(el) {
  const state = { composing: false, endedAt: -Infinity };
  el.addEventListener("compositionstart", () => {
    state.composing = true;
  });
  el.addEventListener("compositionend", () => {
    state.composing = false;
    state.endedAt = performance.now();
  });
  el.addEventListener("blur", () => {
    state.composing = false;
  });
  return state;
}

/** True while the key event belongs to an IME composition. */
export function isComposing(event, state) {
  return Boolean(event.isComposing || event.keyCode === 229 || state.composing || performance.now() - state.endedAt < 20);
}

/** The keydown that submits: Enter (or Ctrl/⌘+Enter) without Shift, outside composition. */
export function isSubmitKey(event, state) {
  return event.key === "Enter" && !event.shiftKey && !event.altKey && !isComposing(event, state);
}
