// The hub's dashboard: the fleet, one agent (and its diagnoses), the audit log.
//
// It reads the REST API under /api/v1 with the API key the person pastes, kept in this
// tab's sessionStorage only. Every value from the hub is put on the page as text
// (textContent, never innerHTML): agent names, audit targets and probe output are
// other people's words. The page's Content-Security-Policy allows no inline script.
"use strict";

const KEY_SLOT = "sonde.apiKey";
const FLEET_REFRESH_MS = 10000;
const AUDIT_LIMIT = 200;
const FLEET_ROWS = 500; // a fleet of thousands is counted whole, listed in part: filter by tag
const SECTIONS = ["sign-in", "fleet", "agent", "audit"];
let refreshTimer = null;
// The filters as last applied (Filter pressed), not as half typed: the refresh, "Check health"
// and "Older entries" read these, and signing out forgets them.
let fleetTag = "";
let fleetStatus = ""; // as the tag: applied when Filter is pressed
let auditQuery = { action: "", agent: "" };
const asked = new Map(); // per slot of the page: how many times it was asked to show something

// --- the page ------------------------------------------------------------------------------

function $(id) {
  return document.getElementById(id);
}

/** An element with attributes and children; a string child is text, never markup. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(section) {
  for (const id of SECTIONS) $(id).hidden = id !== section;
  $("nav").hidden = section === "sign-in";
  $("problem").hidden = true;
}

/** A mark for what ``slot`` (the view, a diagnosis, a health check) is asked to show now: true
 * while it has not been asked for anything since. An answer that arrives after a newer one was
 * asked for (a click, the fleet's refresh, an accept, another view) is dropped, not put over it. */
function ask(slot) {
  const mine = (asked.get(slot) || 0) + 1;
  asked.set(slot, mine);
  return () => asked.get(slot) === mine;
}

/** ``request``'s answer if ``current`` (`ask`) still holds once it is in; else null, and its
 * error, if it fails, is dropped as well: it is not the page's any more. */
async function forCurrent(current, request) {
  try {
    const answer = await request;
    return current() ? answer : null;
  } catch (error) {
    if (current()) throw error;
    return null;
  }
}

function problem(message) {
  $("problem").textContent = message;
  $("problem").hidden = false;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function when(unixSeconds) {
  if (unixSeconds === null || unixSeconds === undefined) return "never";
  const at = typeof unixSeconds === "number" ? new Date(unixSeconds * 1000) : new Date(unixSeconds);
  const ago = Math.round((Date.now() - at.getTime()) / 1000);
  const iso = at.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  if (ago < 0 || ago > 86400) return iso;
  if (ago < 60) return `${iso} (${ago} s ago)`;
  if (ago < 3600) return `${iso} (${Math.round(ago / 60)} min ago)`;
  return `${iso} (${Math.round(ago / 3600)} h ago)`;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "unknown";
  const days = Math.floor(seconds / 86400);
  const hours = Math.floor((seconds % 86400) / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  return days ? `${days} d ${hours} h` : hours ? `${hours} h ${minutes} min` : `${minutes} min`;
}

function millis(ms) {
  return ms === null || ms === undefined ? "" : ms.toFixed(ms < 10 ? 2 : 0);
}

function statusCell(status) {
  return el("td", { class: `status status-${status}` }, status);
}

// --- the API -------------------------------------------------------------------------------

class SignedOut extends Error {}

async function api(path, options = {}) {
  const key = sessionStorage.getItem(KEY_SLOT);
  if (!key) throw new SignedOut("");
  const headers = { Authorization: `Bearer ${key}` };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method: options.method || "GET",
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      cache: "no-store",
    });
  } catch {
    throw new Error("The hub did not answer: is it running, and reachable from this browser?");
  }
  if (response.status === 401) {
    sessionStorage.removeItem(KEY_SLOT);
    throw new SignedOut("The hub did not accept this API key: it is wrong, revoked or expired (sonde hub key list).");
  }
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (answer.error && answer.error.message) || `HTTP ${response.status}`;
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return answer;
}

// --- the views -----------------------------------------------------------------------------

async function showFleet() {
  show("fleet");
  const current = ask("view");
  const tag = fleetTag.replace(/^#/, "");
  const query = new URLSearchParams({ limit: String(FLEET_ROWS) });
  if (tag) query.set("tag", tag);
  if (fleetStatus) query.set("status", fleetStatus);
  const answer = await forCurrent(current, api(`/api/v1/agents?${query}`));
  if (!answer) return;
  const { agents, total, by_status: counts, matched } = answer;
  $("fleet-counts").textContent =
    `${total} agent${total === 1 ? "" : "s"}` +
    Object.entries(counts).map(([status, n]) => `, ${n} ${status}`).join("");
  fill(
    $("agents").tBodies[0],
    agents.map((agent) =>
      el(
        "tr",
        { "data-agent": agent.name },
        el("td", {}, el("a", { href: `#/agent/${encodeURIComponent(agent.name)}` }, agent.name)),
        statusCell(agent.status),
        el("td", { class: "when" }, when(agent.last_seen), agent.last_refusal ? refusalNote(agent.last_refusal) : null),
        el("td", {}, agent.os || ""),
        el("td", {}, agent.agent_version || ""),
        el("td", {}, agent.packs.join(", ")),
        el("td", {}, agent.tags.map((t) => `#${t}`).join(" ")),
      ),
    ),
  );
  $("fleet-empty").hidden = agents.length > 0 && !answer.truncated;
  const which = [tag ? `carries #${tag}` : "", fleetStatus ? `is ${fleetStatus}` : ""].filter(Boolean).join(" and ");
  $("fleet-empty").textContent =
    answer.truncated
      ? `The first ${agents.length} of ${matched} by name are listed; filter by tag or status to see others.`
      : which
        ? `No agent you can see ${which}.`
        : "No agent you can see is enrolled. `sonde hub token create`, then `sonde enroll` on a machine.";
}

async function checkHealth() {
  const out = $("health");
  const current = ask("health");
  const tag = fleetTag;
  out.replaceChildren(el("p", { class: "note" }, `Checking ${tag ? `the agents tagged ${tag}` : "every agent you can see"}...`));
  try {
    const report = await forCurrent(current, api("/api/v1/health-check", { method: "POST", body: tag ? { tags: [tag] } : {} }));
    if (!report) return;
    const s = report.summary;
    const listed = (items, render) => (items.length ? el("ul", {}, ...items.map((i) => el("li", {}, ...render(i)))) : null);
    out.replaceChildren(...[
      el(
        "p",
        { id: "health-summary" },
        `${s.agents_checked} agent${s.agents_checked === 1 ? "" : "s"} checked in ${(s.duration_ms / 1000).toFixed(1)} s: ` +
          `${s.critical} critical, ${s.warning} warning, ${s.info} info; ${s.probes_failed} of ${s.probes_run} probes failed` +
          (report.partial ? " (partial: some did not answer in time)" : "") +
          (s.probes_not_started ? `; ${s.probes_not_started} not started before the deadline (too many agents for it)` : "") +
          (s.agents_unreachable ? `; ${s.agents_unreachable} unreachable` : "") +
          ".",
      ),
      el(
        "table",
        { id: "health-categories" },
        el("thead", {}, el("tr", {}, el("th", {}, "Category"), el("th", {}, "Status"), el("th", {}, "Agents"))),
        el(
          "tbody",
          {},
          ...report.categories.map((c) =>
            el("tr", { "data-category": c.category }, el("td", {}, c.category), el("td", { class: `status severity-${c.status}` }, c.status), el("td", { class: "num" }, c.agents)),
          ),
        ),
      ),
      listed(report.findings, (f) => [
        el("span", { class: `severity-${f.severity}` }, f.severity),
        " ",
        el("a", { href: `#/agent/${encodeURIComponent(f.agent)}` }, f.agent),
        ` ${f.category}: ${f.title}: ${f.detail}`,
      ]),
      listed(report.unreachable, (u) => [el("span", { class: "status-offline" }, "unreachable"), ` ${u.agent}: ${u.reason}`]),
    ].filter(Boolean));
  } catch (error) {
    if (error instanceof SignedOut) return signIn(error.message);
    out.replaceChildren(el("p", { class: "error" }, error.message));
  }
}

function refusalNote(refusal) {
  return el("div", { class: "warning" }, `refused ${when(refusal.at)} from ${refusal.peer}: ${refusal.reason}`);
}

async function showAgent(name) {
  show("agent");
  ask("diagnosis"); // one still running was asked on another view
  $("diagnosis").replaceChildren();
  const current = ask("view");
  const agent = await forCurrent(current, api(`/api/v1/agents/${encodeURIComponent(name)}`));
  if (!agent) return;
  $("agent-name").replaceChildren(agent.name, " ", el("span", { class: `status status-${agent.status}` }, agent.status));
  const facts = [
    ["ID", agent.id],
    ["Host", `${agent.hostname || "?"} (${agent.arch || "?"})`],
    ["OS", agent.os || ""],
    ["Kernel", agent.kernel || ""],
    ["Agent version", agent.agent_version || ""],
    ["Enrolled", when(agent.enrolled_at)],
    ["Connected since", agent.connected_since ? when(agent.connected_since) : "not connected"],
    ["Last seen", when(agent.last_seen)],
    ["Machine up", duration(agent.uptime_s)],
    ["Packs", agent.packs.join(", ")],
    ["Tags", agent.tags.map((t) => `#${t}`).join(" ") || "none"],
    ...attested(agent.attestation),
  ];
  if (agent.last_refusal) facts.push(["Last refused", refusalNote(agent.last_refusal)]);
  $("agent-facts").replaceChildren(...facts.flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]));
  const held = agent.attestation && agent.attestation.pending_change;
  $("agent-held").hidden = !held;
  $("agent-held").replaceChildren();
  if (held) {
    $("agent-held").append(
      el("p", {}, "Its attestation changed since it was accepted, so it runs no probe until an admin accepts the change:"),
      el("ul", {}, ...agent.attestation.pending_changes.map((change) => el("li", { class: "mono" }, change))),
      el("button", { type: "button", id: "accept-held" }, "Accept this change"),
      ` (or: sonde hub agent accept ${agent.name})`,
      el("p", { id: "accept-problem", class: "error" }),
    );
    $("accept-held").addEventListener("click", () => acceptHeld(agent.name));
  }
  $("categories").replaceChildren(
    ...agent.categories.map((category) =>
      el("button", { type: "button", "data-category": category }, category),
    ),
  );
  for (const button of $("categories").querySelectorAll("button")) {
    button.addEventListener("click", () => diagnose(agent.name, button.dataset.category));
  }
  fill(
    $("recent").tBodies[0],
    agent.recent_probes.map((p) =>
      el(
        "tr",
        {},
        el("td", { class: "when" }, when(p.ts)),
        el("td", {}, p.action),
        el("td", { class: "mono" }, p.probe || ""),
        el("td", {}, p.outcome),
        el("td", { class: "num" }, millis(p.duration_ms)),
        el("td", {}, p.by_you ? "yes" : ""),
      ),
    ),
  );
}

// The accepted baseline the agent's claims are held against: what was attested, not what it says now.
function attested(attestation) {
  if (!attestation || !attestation.code_hash) return [["Attested", "nothing accepted yet"]];
  const packs = Object.entries(attestation.packs).map(([pack, version]) => `${pack} ${version}`);
  return [
    ["Attested code hash", attestation.code_hash],
    ["Attested as", `agent ${attestation.agent_version || "?"} on ${attestation.os || "?"}, kernel ${attestation.kernel || "?"}`],
    ["Attested packs", packs.join(", ") || "none"],
  ];
}

async function acceptHeld(agentName) {
  try {
    await api(`/api/v1/agents/${encodeURIComponent(agentName)}/attestation/accept`, { method: "POST" });
    await showAgent(agentName);
  } catch (error) {
    if (error instanceof SignedOut) return signIn(error.message);
    $("accept-problem").textContent = error.status === 403 ? "Accepting a change needs an admin key." : error.message;
  }
}

async function diagnose(agentName, category) {
  const out = $("diagnosis");
  const current = ask("diagnosis");
  out.replaceChildren(el("p", { class: "note" }, `Diagnosing ${category} on ${agentName}...`));
  try {
    const report = await forCurrent(
      current,
      api("/api/v1/diagnose", { method: "POST", body: { agent: agentName, category, description: "from the dashboard" } }),
    );
    if (!report) return;
    const findings = report.findings.length
      ? el(
          "ul",
          { class: "findings" },
          ...report.findings.map((f) =>
            el("li", {}, el("span", { class: `severity-${f.severity}` }, f.severity), ` ${f.title}: ${f.detail}`),
          ),
        )
      : el("p", { class: "severity-info" }, "No findings.");
    const readings = report.readings.map((r) =>
      el(
        "details",
        { "data-probe": r.probe },
        el("summary", {}, `${r.probe}: ${r.status}${r.duration_ms == null ? "" : `, ${millis(r.duration_ms)} ms`}`),
        el("pre", {}, r.error ? r.error : JSON.stringify(r.result, null, 2)),
      ),
    );
    out.replaceChildren(
      el("h4", {}, `${category} on ${agentName}${report.complete ? "" : " (incomplete)"}`),
      findings,
      ...readings,
    );
  } catch (error) {
    if (error instanceof SignedOut) return signIn(error.message);
    out.replaceChildren(el("p", { class: "error" }, error.message));
  }
}

/** The newest entries that match the filters; with ``older``, the next ones after those shown. */
async function showAudit(older = false) {
  if (!older) show("audit");
  const current = ask("view");
  const tbody = $("entries").tBodies[0];
  const last = older ? tbody.lastElementChild : null;
  const params = new URLSearchParams({ limit: String(AUDIT_LIMIT) });
  for (const [field, value] of Object.entries(auditQuery)) {
    if (value) params.set(field, value);
  }
  // `until` is exclusive: a hair past the last row shown, so a row of the same moment is not
  // skipped; the rows already shown are left out by their sequence number.
  if (last) params.set("until", String(Number(last.dataset.ts) + 1e-6));
  let both;
  try {
    both = await forCurrent(current, Promise.all([api(`/api/v1/audit?${params}`), api("/api/v1/api-keys")]));
  } catch (error) {
    if (error.status === 403) {
      fill($("entries").tBodies[0], []);
      $("audit-more").hidden = true;
      throw new Error("The audit log needs an admin key; this key is a member's.");
    }
    throw error;
  }
  if (!both) return;
  const [page, { keys }] = both;
  const keyNames = new Map(keys.map((k) => [k.id, k.name]));
  const entries = last ? page.entries.filter((e) => e.seq < Number(last.dataset.seq)) : page.entries;
  const rows = entries.map((e) =>
      el(
        "tr",
        { "data-seq": e.seq, "data-ts": e.ts },
        el("td", { class: "num" }, e.seq),
        el("td", { class: "when" }, when(e.ts)),
        el("td", { class: "mono", title: e.actor }, keyNames.has(e.actor) ? `${keyNames.get(e.actor)} (key)` : e.actor),
        el("td", {}, e.action),
        el("td", { class: "mono" }, e.target || ""),
        el("td", {}, e.outcome),
        el("td", { class: "num" }, millis(e.duration_ms)),
        el("td", {}, Object.keys(e.detail).length ? el("code", {}, JSON.stringify(e.detail)) : ""),
      ),
  );
  if (last) tbody.append(...rows);
  else fill(tbody, rows);
  $("audit-more").hidden = !page.truncated;
}

async function verifyAudit() {
  const verdict = $("audit-verdict");
  verdict.className = "";
  verdict.textContent = "Verifying...";
  try {
    const report = await api("/api/v1/audit/verify");
    verdict.className = report.ok ? "verdict-ok" : "verdict-broken";
    verdict.textContent = report.ok
      ? `The chain is intact: ${report.rows} rows.`
      : `The chain is broken at #${report.firstBadSeq}: ${report.problem}`;
  } catch (error) {
    if (error instanceof SignedOut) return signIn(error.message);
    verdict.className = "error";
    verdict.textContent = error.status === 403 ? "Verifying needs an admin key." : error.message;
  }
}

// --- signing in and routing ----------------------------------------------------------------

function signIn(message) {
  clearInterval(refreshTimer); // signed out: its next refresh would blank this message
  refreshTimer = null;
  show("sign-in");
  $("sign-in-error").textContent = message || "";
  $("key").focus();
}

async function route() {
  clearInterval(refreshTimer);
  refreshTimer = null;
  const hash = location.hash || "#/";
  try {
    if (hash.startsWith("#/agent/")) {
      await showAgent(decodeURIComponent(hash.slice("#/agent/".length)));
    } else if (hash === "#/audit") {
      await showAudit();
    } else {
      ask("health"); // a check is of its moment: not kept across views, nor one still running
      $("health").replaceChildren();
      await showFleet();
      refreshTimer = setInterval(() => showFleet().catch(failed), FLEET_REFRESH_MS);
    }
  } catch (error) {
    failed(error);
  }
}

function failed(error) {
  if (error instanceof SignedOut) {
    signIn(error.message);
  } else {
    for (const id of SECTIONS) $(id).hidden = true; // not the last view's content under a new name
    problem(error.message);
  }
}

function start() {
  fetch("/api/v1/health", { cache: "no-store" })
    .then((r) => r.json())
    .then((health) => ($("version").textContent = `version ${health.version}`))
    .catch(() => {});
  $("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("key").value.trim();
    $("key").value = "";
    if (!key) return;
    sessionStorage.setItem(KEY_SLOT, key);
    route();
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_SLOT);
    fleetTag = ""; // the next key's holder starts with no one else's filters
    fleetStatus = "";
    auditQuery = { action: "", agent: "" };
    for (const id of ["tag", "status-filter", "audit-action", "audit-agent"]) $(id).value = "";
    signIn("Signed out.");
  });
  $("tag-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    fleetTag = $("tag").value.trim();
    fleetStatus = $("status-filter").value;
    showFleet().catch(failed);
  });
  $("audit-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    auditQuery = { action: $("audit-action").value.trim(), agent: $("audit-agent").value.trim() };
    showAudit().catch(failed);
  });
  $("audit-verify").addEventListener("click", verifyAudit);
  $("audit-older").addEventListener("click", () => showAudit(true).catch(failed));
  $("check-health").addEventListener("click", checkHealth);
  window.addEventListener("hashchange", route);
  route();
}

document.addEventListener("DOMContentLoaded", start);
