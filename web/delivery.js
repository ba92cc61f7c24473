// Delivery labels: the ledger's state per (message, recipient), in honest words
// (docs/architecture.md "The delivery ledger", docs/protocol.md "Delivery reason codes").
// Under a message they are compact: one icon per recipient (or per state, past two), the words
// shown on hover or keyboard focus and always read by a screen reader; a state that needs a
// person (failed, unknown) keeps its words in sight. A click opens the full list.
// Receipts are asked once per message when it scrolls into view; `delivery` frames keep them
// live; after a resume the open ones are asked again (delivery frames are not replayed).

import { h, icon } from "./dom.js";
import { hasString, t } from "./i18n.js";
import { member } from "./store.js";

export const OPEN_STATES = new Set(["pending", "held", "delivered", "unknown"]);
const ORDER = ["consumed", "delivered", "pending", "held", "unknown", "failed", "cancelled"];
const ICON = { pending: "clock", held: "pause", delivered: "check", consumed: "checks", unknown: "alert", failed: "alert", cancelled: "close" };
// States a person should act on or know about at once: their words stay visible.
const LOUD = new Set(["failed", "unknown"]);

/** Why a row is in its state: the server's `reason_code` in the interface language, or, for a
 * code this page does not know (or a server that sends none), the server's own words. */
export function reasonText(delivery) {
  const key = `reason.${delivery.reason_code}`;
  if (delivery.reason_code && hasString(key)) return t(key);
  return delivery.reason || "";
}

/** The sentence for one ledger row; what the server said beyond the code (a provider's error)
 * follows the translation. */
export function stateLabel(delivery) {
  const { state, mode } = delivery;
  const known = delivery.reason_code && hasString(`reason.${delivery.reason_code}`);
  const detail = known && delivery.reason_detail ? delivery.reason_detail : "";
  const reason = reasonText(delivery) + (detail ? t("delivery.detail", { detail }) : "");
  if (state === "consumed") return mode === "steer" ? t("delivery.consumedSteer") : t("delivery.consumed");
  if (state === "failed") return reason ? t("delivery.failedWhy", { reason }) : t("delivery.failed");
  if (state === "cancelled") return reason ? t("delivery.cancelledWhy", { reason }) : t("delivery.cancelled");
  return t(`delivery.${state}`);
}

export function shortLabel(state) {
  return t(`deliveryShort.${state}`);
}

/** Apply a receipts answer (the full rows of one message). */
export function setReceipts(room, messageId, rows) {
  room.receipts.set(messageId, new Map(rows.map((row) => [row.recipient_id, row])));
}

/** Apply one `delivery` frame. */
export function applyDelivery(room, frame) {
  if (!room.receipts.has(frame.message_id)) room.receipts.set(frame.message_id, new Map());
  const rows = room.receipts.get(frame.message_id);
  const old = rows.get(frame.recipient_id) || {};
  rows.set(frame.recipient_id, {
    ...old,
    id: frame.delivery_id ?? old.id,
    recipient_id: frame.recipient_id,
    state: frame.state,
    mode: frame.mode ?? null,
    reason: frame.reason ?? null,
    reason_code: frame.reason_code ?? null,
    reason_detail: frame.reason_detail ?? null,
  });
}

/** Render the delivery line of one message into its `.msg-delivery` slot. */
export function renderDelivery(slot, room, messageId) {
  const rows = [...(room.receipts.get(messageId)?.values() || [])];
  slot.replaceChildren();
  if (!rows.length) return;
  rows.sort((a, b) => a.recipient_id - b.recipient_id);
  const name = (row) => {
    const m = member(room, row.recipient_id);
    return m ? `@${m.handle}` : `#${row.recipient_id}`;
  };
  const summary = h("summary", { class: "delivery-summary" });
  // The words in sight on hover or focus (the same words the hidden spans give a screen reader).
  const tip = h("span", { class: "delivery-tip", attrs: { "aria-hidden": "true" } });
  if (rows.length <= 2) {
    rows.forEach((row, i) => {
      if (i) summary.append(h("span", { class: "sep", attrs: { "aria-hidden": "true" }, text: "·" }));
      const words = LOUD.has(row.state) ? "" : "delivery-words";
      summary.append(
        h("span", { class: ["delivery-item", `ds-${row.state}`], dataset: { recipient: String(row.recipient_id), state: row.state } },
          icon(ICON[row.state] || "dot"),
          h("span", { class: ["delivery-who", words], text: name(row) }),
          h("span", { class: ["delivery-state", words], text: stateLabel(row) })),
      );
      tip.append(h("span", { text: `${name(row)} ${stateLabel(row)}` }));
    });
  } else {
    const counts = new Map();
    for (const row of rows) counts.set(row.state, (counts.get(row.state) || 0) + 1);
    summary.append(h("span", { class: ["delivery-who", "delivery-words"], text: t("delivery.toN", { n: rows.length }) }));
    tip.append(h("span", { text: t("delivery.toN", { n: rows.length }) }));
    for (const state of ORDER) {
      if (!counts.has(state)) continue;
      const text = `${counts.get(state)} ${shortLabel(state)}`;
      summary.append(
        h("span", { class: ["delivery-count", `ds-${state}`], dataset: { state } },
          icon(ICON[state] || "dot"),
          h("span", { class: "delivery-n", attrs: { "aria-hidden": "true" }, text: String(counts.get(state)) }),
          h("span", { class: "delivery-words", text })),
      );
      tip.append(h("span", { text }));
    }
  }
  summary.append(tip);
  const list = h("ul", { class: "delivery-list", attrs: { "aria-label": t("delivery.details") } });
  for (const row of rows) {
    const m = member(room, row.recipient_id);
    list.append(
      h("li", { class: `ds-${row.state}`, dataset: { recipient: String(row.recipient_id), state: row.state } },
        h("span", { class: "delivery-dot", attrs: { "aria-hidden": "true" } }),
        h("span", { class: "delivery-who", text: m ? `${m.display_name} (@${m.handle})` : name(row) }),
        h("span", { class: "delivery-state", text: stateLabel(row) })),
    );
  }
  slot.append(h("details", { class: "delivery" }, summary, list));
}
