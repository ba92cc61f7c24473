// Emoji reactions (docs/protocol.md "Reactions"): the row of chips under a message (emoji,
// count, pressed when one of them is mine; the names in the title), toggled with a click, and
// the picker: a small fixed set and any other single emoji (checked again by the server).

import { h, icon } from "./dom.js";
import { t } from "./i18n.js";
import { member } from "./store.js";
import { openDialog, openMenu, toastError } from "./ui.js";

export const QUICK_SET = ["👍", "❤️", "😄", "🎉", "👀", "✅", "🙏", "🤔"];

// One grapheme that is an emoji: the server decides; this only spares a round trip.
const EMOJI = /^(\p{Extended_Pictographic}|\p{Regional_Indicator}{2}|[0-9#*]\uFE0F?\u20E3)/u;

export function looksLikeEmoji(text) {
  const value = text.trim();
  if (!value || !EMOJI.test(value)) return false;
  const segments = [...new Intl.Segmenter(undefined, { granularity: "grapheme" }).segment(value)];
  return segments.length === 1;
}

function names(room, ids) {
  return ids.map((id) => (id === room.you ? t("msg.you") : member(room, id)?.display_name || `#${id}`)).join("、");
}

/** The chips of `message`; `toggle(emoji, remove)` sends the change, `pick(anchor)` opens the
 * picker. Nothing when there are no reactions and the viewer may not react. */
export function reactionsRow(room, message, { toggle, pick }) {
  const list = message.reactions || [];
  if (!list.length) return null;
  const row = h("div", { class: "msg-reactions", attrs: { role: "group", "aria-label": t("react.group") } });
  for (const r of list) {
    const mine = r.members.includes(room.you);
    const who = names(room, r.members);
    row.append(
      h(
        "button",
        {
          type: "button",
          class: ["reaction", mine && "mine"],
          dataset: { emoji: r.emoji },
          disabled: !toggle,
          attrs: { "aria-pressed": String(mine), title: t("react.who", { who, emoji: r.emoji }), "aria-label": t("react.chip", { emoji: r.emoji, n: r.count, who }) },
          on: { click: () => toggle?.(r.emoji, mine) },
        },
        h("span", { class: "reaction-emoji", text: r.emoji }),
        h("span", { class: "reaction-count", text: String(r.count) }),
      ),
    );
  }
  if (pick) {
    row.append(
      h("button", {
        type: "button",
        class: "reaction reaction-add",
        attrs: { "aria-label": t("react.add"), title: t("react.add") },
        on: { click: (event) => pick(event.currentTarget) },
      }, icon("smile")),
    );
  }
  return row;
}

/** The picker: the quick set as a menu, then "other emoji…" asking for any one emoji. */
export function openPicker(anchor, room, message, send) {
  const mineOf = (emoji) => (message.reactions || []).some((r) => r.emoji === emoji && r.members.includes(room.you));
  openMenu(
    anchor,
    [
      ...QUICK_SET.map((emoji) => ({
        id: `emoji-${emoji}`,
        label: emoji,
        checked: mineOf(emoji),
        run: () => send(emoji, mineOf(emoji)),
      })),
      "-",
      { id: "emoji-other", label: t("react.other"), run: () => askEmoji().then((emoji) => emoji && send(emoji, mineOf(emoji))) },
    ],
    { label: t("react.add") },
  );
}

function askEmoji() {
  return openDialog({
    title: t("react.other"),
    build: (close) => {
      const input = h("input", { type: "text", class: "input emoji-input", attrs: { autofocus: true, "aria-label": t("react.otherLabel"), maxlength: "32", autocomplete: "off" } });
      const hint = h("p", { class: "field-hint", text: t("react.otherHint") });
      const submit = () => {
        if (looksLikeEmoji(input.value)) close(input.value.trim());
        else hint.textContent = t("react.notEmoji");
      };
      input.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && !event.isComposing && event.keyCode !== 229) {
          event.preventDefault();
          submit();
        }
      });
      return [
        input,
        hint,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close(undefined) } }),
          h("button", { type: "button", class: "btn btn-primary", text: t("react.addIt"), on: { click: submit } })),
      ];
    },
  });
}

/** Send one change; the answer and everyone's view come back as `message_updated`. */
export async function sendReaction(conn, room, message, emoji, remove) {
  try {
    await conn.request({ type: "react", project_id: room.id, message_id: message.id, emoji, remove });
  } catch (err) {
    if (err.code !== "disconnected") toastError(err);
  }
}
