// Members: the list (side panel), the avatar menu (right-click, long-press, keyboard), the member
// card (route and where it comes from, the route actually observed, current work) and member
// operations (pause, resume, stop current work, leave): exactly the ones the server offers this
// viewer on that member (its `allowed_ops`). People only; agents have no path here.

import { get, post } from "./api.js";
import { h, icon } from "./dom.js";
import { errorText, formatDateTime, label, t } from "./i18n.js";
import { avatar, presenceLabel } from "./message.js";
import { changeRoute, loadProviders, routeForm } from "./modelroutes.js";
import { mayChange, member, opsOf, presenceOf } from "./store.js";
import { confirmDialog, openDialog, openMenu, toast, toastError } from "./ui.js";

// How each member operation looks: [icon, label, danger], given whether it is about oneself.
const OP_LOOK = {
  pause: () => ["pause", t("menu.pause"), false],
  resume: () => ["play", t("menu.resume"), false],
  stop: () => ["stop", t("menu.stop"), false],
  leave: (you) => ["leave", you ? t("menu.leaveSelf") : t("menu.remove"), true],
};

export class Members {
  constructor(listEl, { composer, showTasksOf }) {
    this.listEl = listEl;
    this.composer = composer;
    this.showTasksOf = showTasksOf;
    this.room = null;
  }

  open(room) {
    this.room = room;
    this.render();
  }

  render() {
    const room = this.room;
    if (!room) return;
    /** @type {[string, (m: any) => boolean][]} */
    const groups = [
      ["members.agents", (m) => m.kind === "agent" && m.status !== "left"],
      ["members.humans", (m) => m.kind === "human" && m.status !== "left"],
      ["members.departed", (m) => m.status === "left"],
    ];
    const nodes = [];
    if (mayChange(room)) {
      nodes.push(h("div", { class: "panel-actions" },
        h("button", { type: "button", class: "btn btn-small", on: { click: () => this.addAgent() } }, icon("plus"), t("members.addAgent")),
        h("button", { type: "button", class: "btn btn-small", on: { click: () => this.invite() } }, icon("user"), t("members.invite"))));
    }
    for (const [key, test] of groups) {
      const people = [...room.members.values()].filter(test);
      if (!people.length) continue;
      const list = h("ul", { class: "member-list", attrs: { "aria-label": t(key) } });
      for (const m of people) list.append(this.row(m));
      nodes.push(h("h3", { class: "group-title", text: `${t(key)} · ${people.length}` }), list);
    }
    this.listEl.replaceChildren(...nodes);
  }

  row(m) {
    const you = m.id === this.room.you;
    return h(
      "li",
      { class: ["member-row", `is-${m.status}`, m.disabled && "is-disabled"], dataset: { memberId: String(m.id) } },
      avatar(this.room, m.id, "sm"),
      h("button", { type: "button", class: "member-name", on: { click: () => this.card(m.id) } },
        h("span", { class: "name", text: you ? t("members.youSuffix", { name: m.display_name }) : m.display_name }),
        h("span", { class: "handle", text: `@${m.handle}` })),
      h("span", { class: ["role-tag", m.kind === "agent" && "is-agent"], text: label("role", m.role) }),
      h("span", { class: ["status-text", `presence-${presenceOf(this.room, m.id)}`], text: presenceLabel(this.room, m) }),
    );
  }

  /** The avatar menu of a member; `at` is the avatar element or a pointer position. */
  menu(memberId, at) {
    const room = this.room;
    const m = member(room, memberId);
    if (!room || !m) return;
    const you = m.id === room.you;
    /** @type {import("./ui.js").MenuEntry[]} */
    const items = [
      { id: "mention", icon: "at", label: you ? t("menu.mentionSelf") : t("menu.mention"), disabled: m.status === "left" || Boolean(m.disabled), run: () => this.composer.insertMention(m.id) },
      { id: "view", icon: "user", label: t("menu.view"), run: () => this.card(m.id) },
    ];
    if (m.kind === "agent") {
      items.push({ id: "model", icon: "cpu", label: t("menu.model"), run: () => this.card(m.id, { focusModel: true }) });
      items.push({ id: "tasks", icon: "flag", label: t("menu.tasks"), run: () => this.showTasksOf(m.id) });
    }
    const ops = opsOf(m).filter((op) => OP_LOOK[op]);
    if (ops.length) items.push("-");
    /** @type {import("./ui.js").MenuEntry[]} */
    const dangers = [];
    for (const op of ops) {
      const [iconName, text, danger] = OP_LOOK[op](you);
      (danger ? dangers : items).push({ id: op, icon: iconName, label: text, danger, run: () => this.op(m, op) });
    }
    // The red one last, after a separator, not between pause and stop.
    if (dangers.length && items.at(-1) !== "-") items.push("-");
    items.push(...dangers);
    openMenu(at, items, { label: t("member.menuFor", { name: m.display_name }) });
  }

  async op(m, op) {
    const room = this.room;
    if (op === "leave" || op === "stop") {
      const you = m.id === room.you;
      const ok = await confirmDialog({
        title: op === "stop" ? t("confirm.stopTitle", { name: m.display_name }) : you ? t("confirm.leaveSelfTitle") : t("confirm.removeTitle", { name: m.display_name }),
        text: op === "stop" ? t("confirm.stopText") : t("confirm.leaveText"),
        confirmLabel: op === "stop" ? t("menu.stop") : you ? t("menu.leaveSelf") : t("menu.remove"),
        danger: op === "leave",
      });
      if (!ok) return;
    }
    try {
      const result = await post(`/api/projects/${room.id}/members/${m.id}/${op}`, {});
      toast(t(`memberOp.${op}`, { name: m.display_name, n: result.held ?? result.released ?? result.cancelled ?? 0 }));
    } catch (err) {
      toastError(err);
    }
  }

  /** The member card: identity, route with its source label, the observed route, current work. */
  async card(memberId, { focusModel = false } = {}) {
    const room = this.room;
    const m = member(room, memberId);
    if (!m) return;
    const body = h("div", { class: "member-card" }, h("p", { class: "muted", text: t("common.loading") }));
    const fill = async () => {
      try {
        const [detail] = await Promise.all([get(`/api/projects/${room.id}/members/${memberId}`), loadProviders()]);
        body.replaceChildren(...this.cardContent(detail, fill));
        if (focusModel) body.querySelector("select")?.focus();
      } catch (err) {
        body.replaceChildren(h("p", { class: "error-text", text: errorText(err) }));
      }
    };
    fill();
    await openDialog({ title: m.display_name, wide: true, build: () => body });
  }

  cardContent(detail, refresh) {
    const room = this.room;
    const m = detail.member;
    const facts = h("dl", { class: "facts" },
      h("dt", { text: t("card.handle") }), h("dd", { text: `@${m.handle}` }),
      h("dt", { text: t("card.kind") }), h("dd", { text: m.kind === "agent" ? t("card.agent", { driver: label("driver", m.driver) }) : t("card.human") }),
      h("dt", { text: t("card.role") }), h("dd", { text: label("role", m.role) }),
      h("dt", { text: t("card.status") }), h("dd", {}, h("span", { class: ["status-text", `presence-${presenceOf(room, m.id)}`], text: presenceLabel(room, m) })));
    const nodes = [h("div", { class: "card-head" }, avatar(room, m.id, "lg", { still: true }), h("div", {}, h("p", { class: "card-name", text: m.display_name }), h("p", { class: "muted", text: `@${m.handle}` }))), facts];
    if (m.kind !== "agent") return nodes;
    const route = detail.route;
    const observed = detail.observed;
    const routeFacts = h("dl", { class: "facts" },
      h("dt", { text: t("card.model") }), h("dd", {}, h("code", { class: "route-model", text: route.model_id })),
      h("dt", { text: t("card.source") }), h("dd", {}, h("span", { class: ["source-tag", `source-${route.source}`], dataset: { source: route.source }, text: label("routeSource", route.source) })),
      route.reason ? [h("dt", { text: t("card.pickReason") }), h("dd", { text: route.reason })] : null,
      route.pick_refused ? [h("dt", { text: t("card.pickRefused") }), h("dd", { text: label("pickRefused", route.pick_refused) })] : null,
      h("dt", { text: t("card.observed") }),
      h("dd", { class: "observed" }, observed
        ? [h("code", { text: `${observed.provider}/${observed.model_reported ?? "?"}` }),
          h("span", { class: "muted", text: ` · ${observed.ok ? t("card.ok") : t("card.failed", { code: observed.error_code || "" })} · ${Math.round(observed.latency_ms ?? 0)} ms · ${observed.input_tokens}/${observed.output_tokens} tokens · ${formatDateTime(observed.at)}` })]
        : t("card.noObserved")),
      h("dt", { text: t("card.now") }), h("dd", { dataset: { running: String(detail.running) }, text: detail.running ? t("card.running") : t("card.idle") }),
      detail.last_turn ? [h("dt", { text: t("card.lastTurn") }), h("dd", { text: t("card.turn", { state: label("turnState", detail.last_turn.state), steps: detail.last_turn.steps, at: formatDateTime(detail.last_turn.ended_at || detail.last_turn.started_at) }) })] : null,
      h("dt", { text: t("card.tools") }), h("dd", { class: "card-tools" }, (m.tools || detail.tools || []).map((tool) => h("code", { class: "tool-chip", text: tool }))),
      typeof m.read_only === "boolean" ? [h("dt", { text: t("card.access") }), h("dd", { class: "card-access", dataset: { readOnly: String(m.read_only) }, text: m.read_only ? t("card.readOnly") : t("card.writes") })] : null,
      typeof m.sandboxed === "boolean" ? [h("dt", { text: t("card.commands") }), h("dd", {}, h("span", { class: ["card-sandbox", m.sandboxed ? null : "badge badge-warn"], dataset: { sandboxed: String(m.sandboxed) }, text: m.sandboxed ? t("card.sandboxed") : t("card.unsandboxed") }))] : null);
    const owner = mayChange(room);
    const memberLock = route.source === "member" ? route.model_id : "";
    const form = routeForm(room, {
      id: `route-member-${m.id}`,
      labelText: t("card.switchModel"),
      value: memberLock,
      none: t("card.noLock"),
      disabled: !owner,
      save: (value, reason) => changeRoute(room, "member", m.id, value, reason),
      done: refresh,
    });
    const ops = h("div", { class: "card-ops" });
    // Removing someone is apart from pause and stop, under what it does: not one slip away.
    const away = h("div", { class: "card-danger" });
    const you = m.id === room.you;
    for (const op of opsOf(m).filter((name) => OP_LOOK[name])) {
      const [iconName, text, danger] = OP_LOOK[op](you);
      const button = h("button", { type: "button", class: ["btn", "btn-small", danger && "btn-danger"], dataset: { op }, on: { click: async () => {
        await this.op(m, op);
        refresh();
      } } }, icon(iconName), text);
      if (danger) away.append(h("p", { class: "muted", text: t("confirm.leaveText") }), button);
      else ops.append(button);
    }
    nodes.push(h("h3", { text: t("card.route") }), routeFacts, h("h3", { text: t("card.switchModel") }), owner ? form : h("p", { class: "muted", text: t("models.ownerOnly") }));
    if (ops.childElementCount) nodes.push(h("h3", { text: t("card.operations") }), ops);
    if (away.childElementCount) nodes.push(away);
    return nodes;
  }

  async addAgent() {
    const room = this.room;
    const roles = ["lead", "frontend", "backend", "tester", "devops", "design", "docs"];
    await openDialog({
      title: t("members.addAgent"),
      build: (close) => {
        const role = h("select", { id: "add-role" }, roles.map((r) => h("option", { value: r, text: label("role", r) })));
        role.value = "frontend";
        const handle = h("input", { id: "add-handle", required: true, pattern: "[A-Za-z][A-Za-z0-9_\\-]{0,31}", value: "frontend" });
        const name = h("input", { id: "add-name", required: true, maxLength: 64, value: label("role", "frontend") });
        role.addEventListener("change", () => {
          handle.value = role.value;
          name.value = label("role", role.value);
        });
        const form = h("form", { class: "form" },
          field(t("create.role"), role), field(t("create.handle"), handle), field(t("create.displayName"), name),
          h("div", { class: "dialog-actions" }, h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close() } }), h("button", { type: "submit", class: "btn btn-primary", text: t("common.add") })));
        form.addEventListener("submit", async (event) => {
          event.preventDefault();
          try {
            await post(`/api/projects/${room.id}/members`, { role: role.value, handle: handle.value.trim(), display_name: name.value.trim() });
            close(true);
          } catch (err) {
            toastError(err);
          }
        });
        return form;
      },
    });
  }

  async invite() {
    try {
      const { url } = await post(`/api/projects/${this.room.id}/invites`, { role: "member" });
      await openDialog({
        title: t("members.invite"),
        build: (close) => {
          const input = h("input", { id: "invite-url", readOnly: true, value: url, attrs: { "aria-label": t("members.inviteLink") } });
          return [
            h("p", { text: t("members.inviteExplain") }),
            input,
            h("div", { class: "dialog-actions" },
              h("button", { type: "button", class: "btn", text: t("members.copy"), on: { click: async () => {
                input.select();
                try {
                  await navigator.clipboard.writeText(url);
                  toast(t("members.copied"));
                } catch {
                  document.execCommand?.("copy");
                }
              } } }),
              h("button", { type: "button", class: "btn btn-primary", text: t("common.done"), on: { click: () => close() } })),
          ];
        },
      });
    } catch (err) {
      toastError(err);
    }
  }
}

export function field(text, control, hint = null) {
  return h("label", { class: "field" }, h("span", { class: "field-label", text }), control, hint ? h("span", { class: "field-hint", text: hint }) : null);
}

