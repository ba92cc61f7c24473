// Attachments: the composer's tray (paste, drop or pick files; each uploads at once with its
// progress, and can be removed before sending) and a message's files (images as thumbnails that
// open full-size, other files as a card with name, size and type).
//
// An upload is the raw file as the body of POST /api/projects/{id}/attachments?name=… (XHR, for
// its upload progress); the server types it from its content and answers the attachment the
// `send` frame then names by id. Files are served from /attachments/{id}/{name}: only PNG, JPEG,
// GIF and WebP are shown; everything else (an SVG above all) is a download. A PDF shows the
// picture of its first page that the server drew in its sandbox (its `thumb_url`), opens in a
// dialog at full size, and "Open" takes it to a tab of its own (`view_url`: the browser's PDF
// viewer in a sandboxed document, never a frame of this page; docs/protocol.md, "PDF previews").

import { csrf } from "./api.js";
import { h } from "./dom.js";
import { errorText, t } from "./i18n.js";
import { openDialog } from "./ui.js";

const BUSY_RETRIES = 5; // an upload refused because the server is busy with others tries again this often
const SVG_NS = "http://www.w3.org/2000/svg";
const PAPERCLIP = "M21 11.5l-8.6 8.6a5 5 0 0 1-7.1-7.1l8.6-8.6a3.5 3.5 0 0 1 5 5l-8.6 8.6a2 2 0 0 1-2.8-2.8l7.9-7.9";
const FILE = "M14 3H7a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h10a2 2 0 0 0 2-2V8z M14 3v5h5";
const CLOSE = "M6 6l12 12M18 6L6 18";

function glyph(d, cls = "icon") {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", cls);
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  for (const part of d.split(" M")) {
    const path = document.createElementNS(SVG_NS, "path");
    path.setAttribute("d", part.startsWith("M") ? part : `M${part}`);
    svg.append(path);
  }
  return svg;
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

function typeLabel(mime, name) {
  const ext = name.includes(".") ? name.split(".").pop().toUpperCase() : "";
  if (mime === "application/pdf") return "PDF";
  if (mime === "text/plain") return ext || "TXT";
  if (mime === "application/octet-stream") return ext || t("attach.binary");
  const sub = mime.split("/")[1] || mime;
  return sub.length <= 8 ? sub.toUpperCase() : ext || sub;
}

/** The composer's files: `ready()` are the uploaded attachments a send names. */
export class AttachTray {
  constructor(form, input, { roomId, onChange, dropZones = [] }) {
    this.form = form;
    this.roomId = roomId;
    this.onChange = onChange;
    this.items = []; // {key, file, name, size, progress, xhr, attachment, error}
    this.list = h("ul", { class: "attach-tray", attrs: { "aria-live": "polite", "aria-label": t("attach.tray") }, hidden: true });
    // Never shown (the button opens it); labelled all the same.
    this.picker = h("input", { type: "file", multiple: true, hidden: true, tabIndex: -1, attrs: { "aria-label": t("attach.button") } });
    this.button = h(
      "button",
      { type: "button", class: "icon-btn attach-btn", attrs: { "aria-label": t("attach.button"), title: t("attach.button") } },
      glyph(PAPERCLIP),
    );
    const row = form.querySelector(".composer-row");
    row.before(this.list);
    row.prepend(this.button, this.picker);
    this.button.addEventListener("click", () => this.picker.click());
    this.picker.addEventListener("change", () => {
      this.add([...this.picker.files]);
      this.picker.value = "";
    });
    input.addEventListener("paste", (event) => {
      const files = [...(event.clipboardData?.files || [])];
      if (!files.length) return;
      event.preventDefault(); // the file, not its name as text
      this.add(files);
    });
    // Files dropped on the composer or anywhere on the timeline (`dropZones`) go to the tray.
    for (const zone of [form, ...dropZones]) this.acceptDrops(zone);
  }

  acceptDrops(zone) {
    let depth = 0;
    const done = () => {
      depth = 0;
      zone.classList.remove("is-dropping");
    };
    zone.addEventListener("dragenter", (event) => {
      if (!hasFiles(event) || this.button.disabled) return;
      depth += 1;
      zone.dataset.dropLabel = t("attach.drop");
      zone.classList.add("is-dropping");
    });
    zone.addEventListener("dragleave", () => {
      depth = Math.max(0, depth - 1);
      if (!depth) zone.classList.remove("is-dropping");
    });
    zone.addEventListener("dragover", (event) => {
      if (hasFiles(event) && !this.button.disabled) event.preventDefault();
    });
    zone.addEventListener("drop", (event) => {
      done();
      const files = [...(event.dataTransfer?.files || [])];
      if (!files.length) return;
      event.preventDefault();
      this.add(files);
    });
  }

  set disabled(value) {
    this.button.disabled = value;
  }

  ready() {
    return this.items.filter((item) => item.attachment).map((item) => item.attachment);
  }

  busy() {
    return this.items.some((item) => !item.attachment && !item.error);
  }

  add(files) {
    if (this.button.disabled) return;
    for (const file of files) {
      const item = { key: crypto.randomUUID(), file, name: file.name || "pasted", size: file.size, progress: 0 };
      this.items.push(item);
      this.upload(item);
    }
    this.render();
  }

  upload(item) {
    const roomId = this.roomId();
    const xhr = new XMLHttpRequest();
    item.xhr = xhr;
    xhr.open("POST", `/api/projects/${roomId}/attachments?name=${encodeURIComponent(item.name)}`);
    xhr.setRequestHeader("X-CSRF-Token", csrf() || "");
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.upload.addEventListener("progress", (event) => {
      if (!event.lengthComputable) return;
      item.progress = event.loaded / event.total;
      this.renderProgress(item);
    });
    xhr.addEventListener("load", () => {
      let data = null;
      try {
        data = JSON.parse(xhr.responseText);
      } catch {
        data = null;
      }
      const error = data?.error;
      item.xhr = null;
      if (error?.code === "uploads_busy" && (item.busyRetries = (item.busyRetries || 0) + 1) <= BUSY_RETRIES) {
        // The server is receiving as many uploads as it may at once: this file tries again.
        setTimeout(() => this.items.includes(item) && this.upload(item), error.details?.retry_after_ms || 1000);
        return;
      }
      if (xhr.status === 201 && data?.attachment) item.attachment = data.attachment;
      else if (error?.code === "too_large") item.error = t("attach.tooLarge", { size: formatSize(error.details?.limit || 0) });
      else if (error?.code === "project_quota") item.error = t("attach.projectFull", { size: formatSize(error.details?.limit || 0) });
      else if (error?.code === "rate_limited") item.error = t("attach.tooFast", { secs: Math.ceil((error.details?.retry_after_ms || 1000) / 1000) });
      else item.error = errorText({ code: error?.code, message: error?.message, details: error?.details });
      this.render();
    });
    xhr.addEventListener("error", () => {
      item.error = t("error.network");
      item.xhr = null;
      this.render();
    });
    xhr.send(item.file);
  }

  remove(item) {
    this.items = this.items.filter((other) => other !== item);
    if (item.xhr) item.xhr.abort();
    else if (item.attachment) {
      // Not sent yet: the server forgets it too (best effort; an unsent upload harms nobody).
      fetch(`/api/projects/${this.roomId()}/attachments/${item.attachment.id}`, {
        method: "DELETE",
        headers: { "X-CSRF-Token": csrf() || "" },
        credentials: "same-origin",
      }).catch(() => {});
    }
    this.render();
  }

  /** After a send: the tray empties (the files now belong to the message). */
  take() {
    const sent = this.ready();
    this.items = [];
    this.render();
    return sent;
  }

  /** A refused send: its files come back to the tray. */
  restore(attachments) {
    for (const attachment of attachments || []) {
      this.items.push({ key: crypto.randomUUID(), name: attachment.name, size: attachment.size, progress: 1, attachment });
    }
    this.render();
  }

  clear() {
    for (const item of this.items) item.xhr?.abort();
    this.items = [];
    this.render();
  }

  render() {
    this.list.replaceChildren(...this.items.map((item) => this.entry(item)));
    this.list.hidden = !this.items.length;
    this.onChange?.();
  }

  renderProgress(item) {
    const bar = this.list.querySelector(`[data-key="${item.key}"] progress`);
    if (bar) bar.value = item.progress;
    const label = this.list.querySelector(`[data-key="${item.key}"] .attach-state`);
    if (label) label.textContent = t("attach.uploading", { pct: Math.round(item.progress * 100) });
  }

  entry(item) {
    const a = item.attachment;
    const preview = a?.thumb_url
      ? h("img", { class: "attach-thumb", src: a.thumb_url, alt: "" })
      : h("span", { class: "attach-thumb attach-thumb-file" }, glyph(FILE));
    let state;
    if (item.error) state = h("span", { class: "attach-state is-error", text: item.error });
    else if (a) state = h("span", { class: "attach-state", text: formatSize(a.size) });
    else state = h("span", { class: "attach-state", text: t("attach.uploading", { pct: Math.round(item.progress * 100) }) });
    return h(
      "li",
      { class: ["attach-item", item.error && "is-error", !a && !item.error && "is-uploading"], dataset: { key: item.key } },
      preview,
      h(
        "span",
        { class: "attach-meta" },
        h("span", { class: "attach-name", text: item.name, attrs: { title: item.name } }),
        state,
        !a && !item.error ? h("progress", { max: 1, value: item.progress, attrs: { "aria-label": t("attach.progress", { name: item.name }) } }) : null,
      ),
      h(
        "button",
        {
          type: "button",
          class: "icon-btn attach-remove",
          attrs: { "aria-label": t("attach.remove", { name: item.name }), title: t("attach.remove", { name: item.name }) },
          on: { click: () => this.remove(item) },
        },
        glyph(CLOSE),
      ),
    );
  }
}

function hasFiles(event) {
  return [...(event.dataTransfer?.types || [])].includes("Files");
}

/** A message's files, below its body (nothing when it has none). */
export function renderAttachments(message) {
  const files = message.meta?.attachments;
  if (!files?.length || message.deleted) return null;
  return h("div", { class: "msg-attachments" }, files.map(fileOf));
}

function fileOf(file) {
  if (file.mime === "application/pdf" && file.thumb_url) return pdfOf(file);
  return file.thumb_url ? imageOf(file) : cardOf(file);
}

function imageOf(file) {
  const ratio = file.width && file.height ? `${file.width} / ${file.height}` : null;
  const img = h("img", { src: file.thumb_url, alt: file.name, loading: "lazy", decoding: "async" });
  if (ratio) img.style.aspectRatio = ratio; // CSSOM, allowed by the CSP
  return h(
    "button",
    {
      type: "button",
      class: "attach-image",
      attrs: { "aria-label": t("attach.open", { name: file.name }), title: file.name },
      on: { click: () => openImage(file) },
    },
    img,
  );
}

function cardOf(file) {
  return h(
    "a",
    {
      class: "attach-card",
      href: file.url,
      attrs: { download: file.name, title: t("attach.download", { name: file.name }) },
    },
    h("span", { class: "attach-card-icon" }, glyph(FILE)),
    h(
      "span",
      { class: "attach-card-meta" },
      h("span", { class: "attach-name", text: file.name }),
      h("span", { class: "attach-card-info", text: `${formatSize(file.size)} · ${typeLabel(file.mime, file.name)}` }),
    ),
  );
}

function openImage(file) {
  // Only the safe raster types are shown full-size; another image (a TIFF, say) is downloaded.
  if (!file.inline) {
    const link = h("a", { href: file.url, attrs: { download: file.name } });
    link.click();
    return;
  }
  openDialog({
    title: file.name,
    wide: true,
    className: "image-dialog",
    build: () => [
      h("img", { class: "image-full", src: file.url, alt: file.name }),
      h(
        "p",
        { class: "image-info" },
        `${file.width}×${file.height} · ${formatSize(file.size)} · `,
        h("a", { href: file.url, attrs: { download: file.name }, text: t("attach.downloadShort") }),
      ),
    ],
  });
}

function pagesText(pages) {
  if (!pages) return null;
  return t("attach.pdfPages", { n: pages });
}

function pdfLinks(file) {
  return [
    file.view_url
      ? h("a", {
          class: "attach-pdf-open",
          href: file.view_url,
          target: "_blank",
          rel: "noopener noreferrer",
          text: t("attach.pdfOpen"),
          attrs: { title: t("attach.pdfOpenTitle", { name: file.name }) },
        })
      : null,
    h("a", { href: file.url, text: t("attach.downloadShort"), attrs: { download: file.name, title: t("attach.download", { name: file.name }) } }),
  ];
}

/** A PDF with a preview: the picture of its first page (a button that opens it larger), its
 * name, page count and size, and its two links. */
function pdfOf(file) {
  const img = h("img", { src: file.thumb_url, alt: "", loading: "lazy", decoding: "async" });
  if (file.width && file.height) img.style.aspectRatio = `${file.width} / ${file.height}`;
  const info = ["PDF", pagesText(file.pages), formatSize(file.size)].filter(Boolean).join(" · ");
  return h(
    "div",
    { class: "attach-pdf" },
    h(
      "button",
      {
        type: "button",
        class: "attach-pdf-page",
        attrs: { "aria-label": t("attach.pdfPreview", { name: file.name }), title: file.name },
        on: { click: () => openPdf(file) },
      },
      img,
    ),
    h(
      "span",
      { class: "attach-pdf-meta" },
      h("span", { class: "attach-name", text: file.name, attrs: { title: file.name } }),
      h("span", { class: "attach-card-info", text: info }),
      h("span", { class: "attach-pdf-links" }, ...pdfLinks(file)),
    ),
  );
}

function openPdf(file) {
  openDialog({
    title: file.name,
    wide: true,
    className: "image-dialog pdf-dialog",
    build: () => [
      h("img", { class: "image-full pdf-page-full", src: file.thumb_url, alt: t("attach.pdfPreview", { name: file.name }) }),
      h(
        "p",
        { class: "image-info" },
        [file.pages ? t("attach.pdfFirstPage", { n: file.pages }) : null, formatSize(file.size)].filter(Boolean).join(" · ") + " · ",
        ...pdfLinks(file)
          .filter(Boolean)
          .flatMap((link, i) => (i ? [" · ", link] : [link])),
      ),
    ],
  });
}
