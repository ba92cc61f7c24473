// A person's own email digest (issue 30 item 6, docs/protocol.md "Notifications"): the address
// the server mails their unread mentions to when they are away, set here (PUT /api/me/digest),
// and the language it is written in — the page's own: the page tells the server the language it
// shows when it starts and whenever the person switches (PUT /api/me/lang).

import { get, put } from "./api.js";
import { h } from "./dom.js";
import { errorText, getLang, onLang, t } from "./i18n.js";
import { openDialog, toast } from "./ui.js";

/** The server's name of the page's language. */
export const serverLang = (lang = getLang()) => (lang === "en" ? "en" : "zh");

/** Keep the server's record of the person's language the page's; call once signed in. */
export async function syncLanguage() {
  const send = () => put("/api/me/lang", { lang: serverLang() }).catch(() => {}); // retried on the next switch or load
  onLang(send);
  try {
    const contact = await get("/api/me/digest");
    if (contact.lang !== serverLang()) await send();
  } catch {
    /* a page that cannot read it now sends it on the next switch */
  }
}

/** The digest dialog: the address (empty: no digest), in which language, whether the server
 * sends any. */
export async function openDigest() {
  let contact;
  try {
    contact = await get("/api/me/digest");
  } catch (err) {
    toast(errorText(err), { kind: "error" });
    return;
  }
  await openDialog({
    title: t("digest.title"),
    className: "digest-dialog",
    build: (close) => {
      const input = h("input", { id: "digest-email", type: "email", value: contact.email ?? "", maxLength: 254, attrs: { autocomplete: "email", "aria-describedby": "digest-email-error digest-hint" } });
      const error = h("p", { id: "digest-email-error", class: "error-text field-error", attrs: { role: "alert" }, hidden: true });
      const save = async (email) => {
        error.hidden = true;
        try {
          const answer = await put("/api/me/digest", { email, lang: serverLang() });
          toast(answer.email ? t("digest.saved", { email: answer.email }) : t("digest.removed"));
          close(answer);
        } catch (err) {
          error.textContent = errorText(err);
          error.hidden = false;
          input.setAttribute("aria-invalid", "true");
          input.focus();
        }
      };
      // The server checks the address; its refusal is shown under the field (no browser bubble).
      const form = h("form", { class: "form", attrs: { novalidate: "" } },
        h("p", { id: "digest-hint", class: "dialog-text", text: t("digest.text", { lang: t(`digest.lang.${serverLang()}`) }) }),
        contact.enabled ? null : h("p", { class: "dialog-text muted digest-off", text: t("digest.off") }),
        h("label", { class: "field" }, h("span", { class: "field-label", text: t("digest.email") }), input),
        error,
        h("div", { class: "dialog-actions" },
          contact.email ? h("button", { type: "button", class: "btn", text: t("digest.remove"), on: { click: () => save(null) } }) : null,
          h("button", { type: "submit", class: "btn btn-primary", text: t("digest.save") }))); // prettier-ignore
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        save(input.value.trim() || null);
      });
      return form;
    },
  });
}
