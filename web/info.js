// Message info, in one place: when it was sent and edited, its earlier versions (the server
// gives `edits` only to the author and the owners — nothing is shown when it is absent), who it
// was delivered to and in which state (the delivery ledger's rows), and who reacted.

import { get } from "./api.js";
import { h } from "./dom.js";
import { stateLabel } from "./delivery.js";
import { formatDateTime, t } from "./i18n.js";
import { authorName } from "./message.js";
import { member } from "./store.js";
import { openDialog, toastError } from "./ui.js";

export async function openMessageInfo(room, message) {
  let detail;
  try {
    detail = await get(`/api/messages/${message.id}`);
  } catch (err) {
    toastError(err);
    return;
  }
  const who = (id) => {
    const m = member(room, id);
    return m ? `${m.display_name} (@${m.handle})` : `#${id}`;
  };
  await openDialog({
    title: t("info.title"),
    className: "message-info",
    build: () => {
      const facts = h("dl", { class: "info-facts" },
        h("dt", { text: t("info.author") }), h("dd", { text: authorName(room, message.author_id) }),
        h("dt", { text: t("info.sent") }), h("dd", {}, h("time", { dateTime: message.created_at, text: formatDateTime(message.created_at) })),
        message.edited_at ? h("dt", { text: t("info.edited") }) : null,
        message.edited_at ? h("dd", { class: "info-edited" }, h("time", { dateTime: message.edited_at, text: formatDateTime(message.edited_at) })) : null,
        h("dt", { text: t("info.seq") }), h("dd", { text: `#${message.seq}` }));
      const sections = [facts];
      const edits = Array.isArray(detail.edits) ? detail.edits.filter((e) => e.action !== "delete") : null;
      if (edits && edits.length) {
        sections.push(h("section", { class: "info-versions" },
          h("h3", { text: t("info.versions", { n: edits.length }) }),
          h("ol", {}, edits.map((e, i) => h("li", { class: "info-version" },
            h("div", { class: "info-version-head" },
              h("span", { text: i === 0 ? t("info.original") : t("info.versionN", { n: i + 1 }) }),
              h("time", { dateTime: e.edited_at, title: t("info.replacedAt"), text: formatDateTime(e.edited_at) })),
            h("pre", { class: "info-version-body", text: e.body }))))));
      }
      const rows = Array.isArray(detail.deliveries) ? detail.deliveries : [];
      sections.push(h("section", { class: "info-deliveries" },
        h("h3", { text: t("info.deliveries") }),
        rows.length
          ? h("ul", { class: "delivery-list" }, rows.map((row) => h("li", { class: `ds-${row.state}`, dataset: { recipient: String(row.recipient_id), state: row.state } },
              h("span", { class: "delivery-dot", attrs: { "aria-hidden": "true" } }),
              h("span", { class: "delivery-who", text: who(row.recipient_id) }),
              h("span", { class: "delivery-state", text: stateLabel(row) }),
              row.updated_at ? h("time", { class: "muted", dateTime: row.updated_at, text: formatDateTime(row.updated_at) }) : null)))
          : h("p", { class: "muted", text: t("info.noDeliveries") })));
      const reactions = message.reactions || [];
      if (reactions.length) {
        sections.push(h("section", { class: "info-reactions" },
          h("h3", { text: t("info.reactions") }),
          h("ul", {}, reactions.map((r) => h("li", {}, h("span", { class: "reaction-emoji", text: r.emoji }), ` ${r.members.map(who).join("、")}`)))));
      }
      return sections;
    },
  });
}
