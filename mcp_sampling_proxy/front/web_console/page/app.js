// The web console's page. Everything a server chose is put into the page as text (textContent),
// never as HTML; images only as data: URLs of raster types the console server checked.
"use strict";

const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const rendered = new Map();  // key -> card element (kept across updates, so typing is not lost)
let firstState = true;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  return fill(node, ...children);
}

// append children (nested arrays flattened; strings as text nodes, never parsed as HTML)
function fill(node, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const fmt = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "–");
// micro-dollars as the proxy writes them (config/prices.py format_usd): $4.20, $0.0015, $0.00075
function usd(micros) {
  if (typeof micros !== "number") return "–";
  const d = micros / 1e6;
  if (d === 0 || Math.abs(d) >= 0.1) return "$" + d.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
  return "$" + d.toFixed(6).replace(/0+$/, "").replace(/\.$/, "");
}

async function post(body) {
  const response = await fetch("api/answer", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await response.json().catch(() => ({error: `HTTP ${response.status}`}));
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

// The name this person gives, kept for this tab (sessionStorage): it tells approvers apart when a request
// needs several (approval.quorum). A convenience on a page only the URL's holder can open, not a login.
const NAME_KEY = "mcp-sampling-proxy.approver";
const approverName = () => (sessionStorage.getItem(NAME_KEY) || "").trim();

function answer(card, body) {
  if (card.classList.contains("pending") && approverName()) body = {...body, approver: approverName()};
  const error = card.querySelector(".error");
  error.textContent = "";
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  post(body).then(() => {
    card.remove();
    rendered.delete(body.key);
    updateCount();
  }).catch((e) => {
    error.textContent = e.message;
    for (const b of card.querySelectorAll("button")) b.disabled = b.dataset.off === "1";
  });
}

function meta(q) {
  const parts = [["server", q.server], ["tool", q.tool || "none in flight"], ["host", q.host], ["rule", q.rule],
                 ["proxy", q.proxy]];
  return el("div", {class: "meta"}, parts.filter(([, v]) => v).map(([k, v], i) => [i ? " · " : "", `${k} `, el("b", {}, v)]));
}

function image(block) {
  if (block.refused) return el("div", {class: "refused"}, block.refused);
  if (!IMAGE_TYPES.has(block.mimeType) || !BASE64.test(block.data)) return el("div", {class: "refused"}, "image not shown");
  const img = el("img", {alt: `image (${block.mimeType}, ${fmt(block.bytes)} bytes)`});
  img.src = `data:${block.mimeType};base64,${block.data}`;
  return img;
}

function messageBox(role, blocks) {
  return el("div", {class: "msg"}, el("div", {class: "role"}, role),
    blocks.map((b) => (b.type === "image" ? image(b) : el("pre", {}, b.text))));
}

function limitsRow(q) {
  const r = q.request, l = q.limits || {};
  const chips = [el("span", {class: "chip"}, `maxTokens ${fmt(r.max_tokens)}`)];
  if (l.max_tokens_cap !== undefined) chips.push(el("span", {class: "chip"}, `cap ${fmt(l.max_tokens_cap)}`));
  if (l.budget) {
    const low = typeof r.max_tokens === "number" && l.budget.left < r.max_tokens;
    chips.push(el("span", {class: low ? "chip low" : "chip"},
      `budget left ${fmt(l.budget.left)} of ${fmt(l.budget.limit)} tokens per ${l.budget.per}` +
      (l.budget.reserved ? ` (${fmt(l.budget.reserved)} reserved by requests in progress)` : "")));
  }
  if (l.usd_budget) {
    chips.push(el("span", {class: "chip"},
      `budget left ${usd(l.usd_budget.left)} of ${usd(l.usd_budget.limit)} per ${l.usd_budget.per}` +
      (l.usd_budget.reserved ? ` (${usd(l.usd_budget.reserved)} reserved by requests in progress)` : "")));
  }
  if (l.rate_limit) chips.push(el("span", {class: "chip"}, `rate limit ${l.rate_limit}`));
  if (!l.policy) chips.push(el("span", {class: "chip"}, "budgets unknown (no policy: --policy FILE)"));
  return el("div", {class: "limits"}, chips);
}

function quorumRow(quorum) {
  const so_far = quorum.approved_by.length;
  return el("div", {class: "quorum"},
    el("b", {}, `Needs ${quorum.needed} different approvers: ${so_far} of ${quorum.needed} so far`),
    so_far ? ` (approved by ${quorum.approved_by.join(", ")})` : "",
    approverName() ? ` · you approve as ${approverName()}` : " · enter your name at the top to approve");
}

function samplingCard(q) {
  const r = q.request;
  const card = el("article", {class: "card pending", "data-key": q.key});
  const details = [];
  if (r.hints.length) details.push(el("li", {}, `model hints: ${r.hints.join(", ")}`));
  const pr = Object.entries(r.priorities).map(([k, v]) => `${k} ${v}`);
  if (pr.length) details.push(el("li", {}, `priorities: ${pr.join(", ")}`));
  if (r.temperature !== null && r.temperature !== undefined) details.push(el("li", {}, `temperature ${r.temperature}`));
  if (r.stop.length) details.push(el("li", {}, `stop sequences: ${r.stop.join(", ")}`));
  if (r.include_context) details.push(el("li", {}, `includeContext: ${r.include_context}`));
  if (r.tools.length) details.push(el("li", {}, `tools offered: `, r.tools.map((t, i) => [i ? ", " : "", el("b", {}, t.name),
    t.description ? ` (${t.description.slice(0, 120)})` : ""])));
  if (r.tool_choice) details.push(el("li", {}, `toolChoice: ${r.tool_choice}`));
  const editor = el("div", {class: "editor", hidden: true},
    el("label", {}, "New text for the last user message" + (r.kept.length ? ` (its ${r.kept.join(", ")} kept)` : "") + ":"),
    el("textarea", {"aria-label": "edited prompt"}),
    el("div", {class: "actions"},
      el("button", {class: "primary", type: "button", on: {click: () =>
        answer(card, {key: q.key, action: "approve", scope: "once", text: card.querySelector("textarea").value})}},
        "Approve with this prompt"),
      el("button", {type: "button", on: {click: () => { editor.hidden = true; }}}, "Cancel edit")));
  editor.querySelector("textarea").value = r.prompt_text;
  const edit = el("button", {type: "button", title: r.not_editable || "", on: {click: () => { editor.hidden = false; }}},
    "Edit prompt…");
  if (!r.editable) { edit.disabled = true; edit.dataset.off = "1"; }
  const approve = (scope) => () => answer(card, {key: q.key, action: "approve", scope});
  const buttons = q.quorum ? [
    el("button", {class: "primary", type: "button", on: {click: approve("once")}}, "Approve"),
  ] : [
    el("button", {class: "primary", type: "button", on: {click: approve("once")}}, "Allow once"),
    el("button", {type: "button", on: {click: approve("session")}}, "Allow for this session"),
    el("button", {type: "button", on: {click: approve("always")}}, "Always for this server + tool"),
    edit,
  ];
  fill(card,
    el("h3", {}, "Sampling request"), meta(q), q.quorum ? quorumRow(q.quorum) : null, limitsRow(q),
    (q.notes || []).length ? el("div", {class: "notes"}, q.notes.map((n) => el("span", {class: "note"}, n))) : null,
    r.system ? messageBox("system prompt", [{type: "text", text: r.system}]) : null,
    r.messages.map((m) => messageBox(m.role, m.blocks)),
    details.length ? el("ul", {class: "details"}, details) : null,
    el("div", {class: "actions"}, buttons,
      el("button", {class: "danger", type: "button", on: {click: () => answer(card, {key: q.key, action: "deny"})}}, "Deny")),
    editor, el("div", {class: "error", role: "alert"}));
  return card;
}

// A host's tools/call that a tools: rule holds for a human: no messages, the tool and its arguments
function toolCallCard(q) {
  const card = el("article", {class: "card pending tool-call", "data-key": q.key});
  const approve = (scope) => () => answer(card, {key: q.key, action: "approve", scope});
  const buttons = q.quorum ? [
    el("button", {class: "primary", type: "button", on: {click: approve("once")}}, "Approve"),
  ] : [
    el("button", {class: "primary", type: "button", on: {click: approve("once")}}, "Allow once"),
    el("button", {type: "button", on: {click: approve("session")}}, "Allow for this session"),
    el("button", {type: "button", on: {click: approve("always")}}, "Always for this server + tool"),
  ];
  fill(card,
    el("h3", {}, "Tool call"), meta(q), q.quorum ? quorumRow(q.quorum) : null,
    el("p", {class: "ask"}, "The host wants to call tool ", el("b", {}, q.tool_call.name), " with these arguments:"),
    messageBox("arguments", [{type: "text", text: q.tool_call.arguments}]),
    el("div", {class: "actions"}, buttons,
      el("button", {class: "danger", type: "button", on: {click: () => answer(card, {key: q.key, action: "deny"})}}, "Deny")),
    el("div", {class: "error", role: "alert"}));
  return card;
}

function reviewCard(q) {
  const card = el("article", {class: "card review", "data-key": q.key});
  const editor = el("div", {class: "editor", hidden: true}, el("textarea", {"aria-label": "replacement answer"}),
    el("div", {class: "actions"}, el("button", {class: "primary", type: "button", on: {click: () =>
      answer(card, {key: q.key, action: "send", text: card.querySelector("textarea").value})}}, "Send this answer")));
  editor.querySelector("textarea").value = q.answer;
  fill(card, el("h3", {}, "Review the LLM's answer"), meta(q),
    q.prompt ? messageBox("prompt as sent" + (q.prompt_edited_by ? ` (edited at the ${q.prompt_edited_by})` : ""),
      [{type: "text", text: q.prompt}]) : null,
    messageBox("the LLM answered", [{type: "text", text: q.answer}]),
    el("div", {class: "actions"},
      el("button", {class: "primary", type: "button", on: {click: () => answer(card, {key: q.key, action: "send"})}}, "Send to the server"),
      el("button", {type: "button", on: {click: () => { editor.hidden = false; }}}, "Edit answer…"),
      el("button", {class: "danger", type: "button", on: {click: () => answer(card, {key: q.key, action: "reject"})}}, "Reject")),
    editor, el("div", {class: "error", role: "alert"}));
  return card;
}

function fieldInput(f) {
  const id = `f-${Math.random().toString(36).slice(2)}`;
  let input;
  if (f.kind === "boolean") {
    input = el("input", {type: "checkbox", id});
    input.checked = f.default === true;
  } else if (f.kind === "enum") {
    input = el("select", {id}, f.required && f.default !== null ? null : el("option", {value: ""}, "—"),
      f.options.map((o) => el("option", {value: o.value}, o.label)));
    if (f.default !== null) input.value = f.default;
  } else if (f.kind === "multi") {
    input = el("div", {id, class: "multi"}, f.options.map((o) => el("label", {},
      Object.assign(el("input", {type: "checkbox", value: o.value}), {checked: (f.default || []).includes(o.value)}), " ", o.label, " ")));
  } else {
    input = el("input", {type: f.kind === "string" ? "text" : "number", id, step: f.kind === "integer" ? "1" : "any",
      min: f.minimum, max: f.maximum, placeholder: f.expected});
    if (f.default !== null) input.value = String(f.default);
  }
  const box = el("div", {class: "field", "data-name": f.name, "data-kind": f.kind},
    el("label", {for: id}, f.label + (f.required ? " *" : "")), input,
    el("div", {class: "hint"}, f.description ? `${f.description} — ` : "", f.expected));
  box.read = () => {
    if (f.kind === "boolean") return input.checked;
    if (f.kind === "multi") return [...input.querySelectorAll("input:checked")].map((c) => c.value);
    const v = input.value.trim();
    if (v === "") return null;
    if (f.kind === "number" || f.kind === "integer") return Number(v);
    return v;
  };
  return box;
}

function elicitCard(q) {
  const card = el("article", {class: "card elicit", "data-key": q.key});
  const head = [el("h3", {}, q.mode === "url" ? "A server asks you to open a link" : "A server asks you to fill in a form"),
                meta(q), messageBox("message", [{type: "text", text: q.message}])];
  const error = el("div", {class: "error", role: "alert"});
  const decline = [
    el("button", {type: "button", on: {click: () => answer(card, {key: q.key, action: "decline"})}}, "Decline"),
    el("button", {class: "danger", type: "button", on: {click: () => answer(card, {key: q.key, action: "cancel"})}}, "Cancel")];
  if (q.mode === "url") {
    const u = q.url;
    const open = el("button", {class: "primary", type: "button", on: {click: () => answer(card, {key: q.key, action: "open"})}},
      "Open in my browser");
    if (!u.ok) { open.disabled = true; open.dataset.off = "1"; }
    fill(card, ...head, el("div", {class: "url"}, u.before, el("span", {class: "host"}, u.host || "?"), u.after),
      el("p", {}, "It leads to ", el("b", {}, u.host || "?")),
      u.warnings.map((w) => el("p", {class: "warning"}, `Warning: ${w}`)),
      el("div", {class: "actions"}, open, ...decline), error);
    return card;
  }
  if (q.form.error) {
    fill(card, ...head, el("p", {class: "warning"}, `This form cannot be shown: ${q.form.error}`),
      el("div", {class: "actions"}, ...decline), error);
    return card;
  }
  const fields = q.form.fields.map(fieldInput);
  const submit = () => {
    const content = {};
    for (const f of fields) { const v = f.read(); if (v !== null) content[f.dataset.name] = v; }
    answer(card, {key: q.key, action: "accept", content});
  };
  fill(card, ...head, el("div", {class: "form"}, fields),
    el("div", {class: "actions"}, el("button", {class: "primary", type: "button", on: {click: submit}}, "Submit"), ...decline), error);
  return card;
}

function card(q) {
  if (q.type === "pending") return q.tool_call ? toolCallCard(q) : samplingCard(q);
  if (q.type === "review") return reviewCard(q);
  return elicitCard(q);
}

function updateCount() {
  const n = rendered.size;
  document.getElementById("pending-count").textContent = String(n);
  document.getElementById("empty").hidden = n > 0;
  document.title = n ? `(${n}) mcp-sampling-proxy console` : "mcp-sampling-proxy console";
}

function notify(q) {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  const what = q.type === "pending" ? "asks to use an LLM" : q.type === "review" ? "has an answer to review" : "asks a question";
  // an elicitation names its server as the proxy shows it, quoted already: 'name' (which calls itself "claim")
  const who = q.type === "elicit" ? q.server : `'${q.server}'`;
  const n = new Notification("mcp-sampling-proxy", {body: `Server ${who} ${what}`, tag: q.key});
  n.onclick = () => { window.focus(); n.close(); };
}

function applyState(state) {
  const status = document.getElementById("status");
  status.textContent = state.proxies.length
    ? `${state.proxies.length} prox${state.proxies.length === 1 ? "y" : "ies"} attached: ${state.proxies.map((p) => p.server || p.pid).join(", ")}`
    : "no proxy attached yet";
  const notices = document.getElementById("notices");
  notices.replaceChildren(...state.notices.map((n) => el("div", {class: "notice"}, n)));
  const keys = new Set(state.questions.map((q) => q.key));
  for (const [key, node] of rendered) if (!keys.has(key)) { node.remove(); rendered.delete(key); }
  const list = document.getElementById("questions");
  for (const q of state.questions) {
    if (rendered.has(q.key)) continue;
    const node = card(q);
    rendered.set(q.key, node);
    list.append(node);
    if (!firstState) notify(q);
  }
  firstState = false;
  updateCount();
}

function query(extra) {
  const p = new URLSearchParams();
  for (const name of ["server", "tool", "decision", "since"]) {
    const v = document.getElementById(`f-${name}`).value.trim();
    if (v) p.set(name, v);
  }
  for (const [k, v] of Object.entries(extra || {})) p.set(k, v);
  return p.toString();
}

// under a server's row: its tool decisions, and what the sampling checks refused or found (when any)
function governed(s) {
  const t = s.tools || {}, r = s.refused || {};
  const rows = [
    ["tool calls", [[t.calls_allowed, "allowed"], [t.calls_denied, "denied"], [t.calls_held, "held (changed since pinned)"],
      [t.hidden, "listings hid tools"], [t.changes, "tool changes"]]],
    ["sampling checks", [[r.unsolicited, "refused unsolicited"], [r.max_per_call, "over max_per_call"],
      [r.checks, "refused by checks"], [r.secrets, "refused for credentials"], [s.secrets_found, "held credentials"]]],
  ];
  return rows.map(([what, counts]) => [what, counts.filter(([n]) => n)])
    .filter(([, counts]) => counts.length)
    .map(([what, counts]) => [`${what}: `, counts.map(([n, label], i) => [i ? " " : "", el("span", {class: "chip"}, `${fmt(n)} ${label}`)])]);
}

// an empty table's one row, saying why it is empty
const noneRow = (columns, text) => el("tr", {class: "none"}, el("td", {colspan: columns}, text));

async function refreshAudit() {
  const data = await (await fetch(`api/audit?${query({n: 300})}`)).json();
  const note = document.getElementById("audit-note");
  note.textContent = data.error || (data.path ? `${data.path}` : "No audit log: pass --audit FILE, or a policy with audit.path.");
  document.getElementById("audit").replaceChildren(...data.lines.map((l) => el("li", {class: l.failed ? `${l.decision} failed` : l.decision}, l.line,
    (l.notes || []).length ? el("div", {class: "notes"}, l.notes.map((n) => el("span", {class: `note ${n.kind}`}, n.text))) : null)));
  const since = document.getElementById("f-since").value.trim();
  const usage = await (await fetch(`api/usage?${since ? new URLSearchParams({since}) : ""}`)).json();
  const body = document.querySelector("#usage tbody");
  body.replaceChildren(...(usage.servers || []).flatMap((s) => [el("tr", {}, el("td", {}, s.server),
    [s.requests, s.allowed, s.denied, s.errors, s.input_tokens, s.output_tokens].map((n) => el("td", {class: "num"}, fmt(n))),
    el("td", {class: "num"}, usd(Math.round((s.cost_usd || 0) * 1e6)) + (s.unpriced ? ` (+${fmt(s.unpriced)} unpriced)` : ""))),
    ...governed(s).map((parts) => el("tr", {class: "governed"}, el("td", {colspan: 8}, parts)))]));
  if (!(usage.servers || []).length) body.replaceChildren(noneRow(8, usage.error ? "–" : "none yet: no request in the audit log"));
  const covers = usage.covers && usage.covers.records ? `counts from the ${fmt(usage.covers.records)} records since ${usage.covers.since || "?"}` +
    (usage.covers.records >= usage.covers.kept ? ` (the console keeps the last ${fmt(usage.covers.kept)}; for the whole log: mcp-sampling-proxy audit summary)` : "") : "";
  document.getElementById("usage-note").textContent = usage.error || [covers, usage.policy ? `budgets of ${usage.policy}` : ""].filter(Boolean).join("; ");
  document.querySelector("#budgets tbody").replaceChildren(...(usage.budgets || []).map((b) => { const n = b.unit === "usd" ? usd : fmt; return el("tr", {},
    el("td", {}, b.server), el("td", {}, b.rule), el("td", {class: "num"}, n(b.used)), el("td", {class: "num"}, n(b.reserved)),
    el("td", {class: "num"}, b.limit === null ? "?" : `${n(b.limit)} / ${b.per}`), el("td", {class: "num"}, b.left === null ? "?" : n(b.left)),
    el("td", {}, b.resets_at ? new Date(b.resets_at * 1000).toLocaleString() : "–")); }));
  if (!(usage.budgets || []).length) document.querySelector("#budgets tbody").replaceChildren(noneRow(7, usage.no_budgets || "none"));
}

function connect() {
  const source = new EventSource("api/events");
  source.addEventListener("state", (e) => applyState(JSON.parse(e.data)));
  source.addEventListener("audit", () => refreshAudit().catch(() => {}));
  source.onerror = () => { document.getElementById("status").textContent = "disconnected: is the console still running?"; };
}

function setupName() {
  const input = document.getElementById("approver");
  input.value = approverName();
  input.addEventListener("change", () => {
    sessionStorage.setItem(NAME_KEY, input.value.trim());
    for (const [key, node] of rendered) { node.remove(); rendered.delete(key); }  // redrawn with the name
    fetch("api/state").then((r) => r.json()).then(applyState).catch(() => {});
  });
}

function setup() {
  setupName();
  const button = document.getElementById("notify");
  if ("Notification" in window && Notification.permission !== "granted") {
    button.hidden = false;
    button.addEventListener("click", () => Notification.requestPermission().then((p) => { button.hidden = p === "granted"; }));
  }
  let timer = null;
  for (const name of ["server", "tool", "decision", "since"]) {
    const refresh = () => {
      clearTimeout(timer);
      timer = setTimeout(() => refreshAudit().catch(() => {}), 250);
    };
    document.getElementById(`f-${name}`).addEventListener("input", refresh);
    document.getElementById(`f-${name}`).addEventListener("change", refresh);
  }
  refreshAudit().catch(() => {});
  connect();
}

setup();
