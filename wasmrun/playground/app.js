// The wasmrun playground: a page over the same JSON-RPC API as any client (POST /rpc),
// with the same rules: the tenant key (kept in this tab's sessionStorage only) goes
// as a Bearer token, and the server checks Host and Origin as for any request.
// Everything shown from the server is set as text (never parsed as HTML).
"use strict";

const KEY_SLOT = "wasmrun.tenant_key";
const BLOB_ID = /^blob:[0-9a-f]{32}$/;
const IMAGE_KINDS = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const MAX_IMAGE_BYTES = 10 * 1024 * 1024;
const EXAMPLE = `import sys

def main(args):
    name = args.get("name", "world")
    print("hello from", sys.version.split()[0])
    return {"greeting": f"Hello, {name}!", "squares": [i * i for i in range(5)]}
`;

const $ = (id) => document.getElementById(id);
let nextId = 1;

class RpcError extends Error {
  constructor(code, message, data) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

async function rpc(method, params) {
  const headers = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem(KEY_SLOT);
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch("/rpc", {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method, params }),
  });
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    throw new RpcError(response.status, `HTTP ${response.status} ${response.statusText}`);
  }
  if (body && body.error) {
    const hint = response.status === 401 ? " (enter a tenant key above)" : "";
    throw new RpcError(body.error.code, body.error.message + hint, body.error.data);
  }
  return body.result;
}

function text(el, value) {
  el.textContent = value;
  return el;
}

function showKeyState() {
  text($("key-state"), sessionStorage.getItem(KEY_SLOT) ? "key set for this tab" : "no key");
}

async function loadSkills() {
  const list = $("skills");
  const pick = $("skill-pick");
  list.replaceChildren();
  pick.replaceChildren();
  try {
    const skills = [];
    let cursor = null;
    do {
      const page = await rpc("list_skills", { detail: "summary", limit: 100, cursor });
      skills.push(...page.skills);
      cursor = page.next_cursor;
    } while (cursor && skills.length < 1000);
    for (const skill of skills) {
      const item = document.createElement("li");
      const button = text(document.createElement("button"), skill.name);
      button.type = "button";
      button.className = "skill-link";
      button.dataset.skill = skill.name;
      button.addEventListener("click", () => showSkill(skill.name));
      item.append(button, text(document.createElement("small"), ` ${skill.version} — ${skill.description}`));
      list.append(item);
      const option = text(document.createElement("option"), skill.name);
      option.value = skill.name;
      pick.append(option);
    }
    text($("skills-state"), `${skills.length} skill${skills.length === 1 ? "" : "s"}`);
  } catch (err) {
    text($("skills-state"), `cannot list skills: ${err.message}`);
  }
}

async function showSkill(name) {
  $("skill-doc").hidden = false;
  text($("doc-name"), name);
  text($("doc"), "loading...");
  try {
    const { skill } = await rpc("describe_skill", { name, detail: "full" });
    const files = skill.files ? `\n\n---\nfiles: ${skill.files.join(", ")}` : "";
    text($("doc"), (skill.skill_md || "(this skill has no SKILL.md)") + files);
  } catch (err) {
    text($("doc"), `cannot describe ${name}: ${err.message}`);
  }
}

function mode() {
  return document.querySelector('input[name="mode"]:checked').value;
}

function onMode() {
  const skill = mode() === "skill";
  $("code-box").hidden = skill;
  $("skill-pick").disabled = !skill;
}

function runParams() {
  let args;
  try {
    args = JSON.parse($("args").value || "{}");
  } catch (err) {
    throw new RpcError("args", `args is not JSON: ${err.message}`);
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new RpcError("args", "args must be a JSON object, like {\"name\": \"Ada\"}");
  }
  const timeout = $("timeout").value ? Number($("timeout").value) : null;
  if (mode() === "skill") {
    const params = { name: $("skill-pick").value, args, input_blobs: inputBlobs() };
    if (timeout) params.timeout_ms = timeout;
    return ["execute_skill", params];
  }
  const mounts = $("mounts").value.split(",").map((s) => s.trim()).filter(Boolean);
  const params = { language: "python", code: $("code").value, args, mount_skills: mounts, input_blobs: inputBlobs() };
  if (timeout) params.limits = { timeout_ms: timeout };
  const session = chosenSession();
  if (session) {
    params.session_id = session; // a session's skills are its own, fixed when it was made
    delete params.mount_skills;
  }
  return ["run_code", params];
}

async function run() {
  const button = $("run");
  button.disabled = true;
  text($("run-state"), "running...");
  try {
    const [method, params] = runParams();
    const started = performance.now();
    const result = await rpc(method, params);
    text($("run-state"), `answered in ${Math.round(performance.now() - started)} ms`);
    await showResult(result);
    if (params.session_id) await loadSessions();
  } catch (err) {
    text($("run-state"), "");
    showCallError(err);
  } finally {
    button.disabled = false;
  }
}

function showCallError(err) {
  $("result").hidden = false;
  text($("status"), "call refused");
  $("status").className = "failed";
  text($("summary"), "The server did not run it.");
  $("error-box").hidden = false;
  text($("error-type"), `(${err.code ?? "error"})`);
  const data = err.data === undefined ? "" : `\n${JSON.stringify(err.data, null, 2)}`;
  text($("error"), err.message + data);
  for (const id of ["output", "logs"]) text($(id), "");
  $("images").replaceChildren();
  showDisplays([]);
  $("receipt").replaceChildren();
}

async function showResult(result) {
  $("result").hidden = false;
  text($("status"), result.status);
  $("status").className = result.status;
  text($("summary"), result.summary);
  const failed = result.error !== undefined;
  $("error-box").hidden = !failed;
  if (failed) {
    text($("error-type"), result.error.type);
    text($("error"), result.error.message);
  }
  text($("output"), result.output === undefined ? "(none)" : JSON.stringify(result.output, null, 2));
  text($("logs"), result.logs_preview || "(nothing printed)");
  showReceipt(result);
  showDisplays(result.displays || []);
  await showImages(result);
}

// Display results (docs/run-contract.md): a picture as an <img> (data: URL; an SVG in an
// <img> runs no script), HTML in a sandboxed iframe (no script, no same origin), else text.
function showDisplays(displays) {
  const box = $("displays");
  box.replaceChildren();
  $("displays-head").hidden = displays.length === 0;
  for (const display of displays) {
    const data = display.data || {};
    const item = document.createElement("div");
    item.className = display.main ? "display main" : "display";
    if (display.main) item.append(text(document.createElement("span"), "Out:"));
    if (typeof data["image/png"] === "string" || typeof data["image/jpeg"] === "string") {
      const kind = typeof data["image/png"] === "string" ? "image/png" : "image/jpeg";
      const img = document.createElement("img");
      img.alt = data["text/plain"] || kind;
      img.src = `data:${kind};base64,${data[kind]}`;
      item.append(img);
    } else if (typeof data["image/svg+xml"] === "string") {
      const img = document.createElement("img");
      img.alt = data["text/plain"] || "image/svg+xml";
      img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(data["image/svg+xml"])}`;
      item.append(img);
    } else if (typeof data["text/html"] === "string") {
      const frame = document.createElement("iframe");
      frame.setAttribute("sandbox", "");
      frame.title = data["text/plain"] || "HTML display";
      frame.srcdoc = data["text/html"];
      item.append(frame);
    } else {
      const shown = data["text/markdown"] ?? data["text/plain"] ?? JSON.stringify(data["application/json"] ?? null);
      item.append(text(document.createElement("pre"), String(shown)));
    }
    for (const [kind, blobId] of Object.entries(display.blobs || {})) {
      item.append(text(document.createElement("p"), `${kind} is in blob ${blobId}`));
    }
    box.append(item);
  }
}

function showReceipt(result) {
  const rows = [["run_id", result.run_id], ["output_blobs", (result.output_blobs || []).join(", ") || "none"]];
  if (result.logs_blob) rows.push(["logs_blob", result.logs_blob]);
  for (const [name, value] of Object.entries(result.usage || {})) rows.push([name, String(value)]);
  const table = $("receipt");
  table.replaceChildren();
  for (const [name, value] of rows) {
    const tr = document.createElement("tr");
    tr.append(text(document.createElement("th"), name), text(document.createElement("td"), value));
    table.append(tr);
  }
}

function blobIdsIn(value, found, depth = 0) {
  if (found.size >= 20 || depth > 20) return found;
  if (typeof value === "string" && BLOB_ID.test(value)) found.add(value);
  else if (Array.isArray(value)) value.forEach((v) => blobIdsIn(v, found, depth + 1));
  else if (value && typeof value === "object") Object.values(value).forEach((v) => blobIdsIn(v, found, depth + 1));
  return found;
}

async function showImages(result) {
  const box = $("images");
  box.replaceChildren();
  const ids = blobIdsIn(result.output, new Set(result.output_blobs || []));
  for (const blobId of ids) {
    let blob;
    try {
      blob = await rpc("read_blob", { blob_id: blobId, mode: "sample_head", max_bytes: 0 });
    } catch (_) {
      continue; // not a blob this key can read
    }
    if (!IMAGE_KINDS.has(blob.kind) || blob.size_bytes > MAX_IMAGE_BYTES) continue;
    const full = await rpc("read_blob", { blob_id: blobId, mode: "full", max_bytes: blob.size_bytes });
    const figure = document.createElement("figure");
    const img = document.createElement("img");
    img.alt = `${blobId} (${blob.kind})`;
    img.src = `data:${blob.kind};base64,${full.encoding === "base64" ? full.content : btoa(full.content)}`;
    figure.append(img, text(document.createElement("figcaption"), `${blobId} · ${blob.kind} · ${blob.size_bytes} bytes`));
    box.append(figure);
  }
}

function init() {
  $("code").value = EXAMPLE;
  $("args").value = '{"name": "Ada"}';
  showKeyState();
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("key").value.trim();
    if (key) sessionStorage.setItem(KEY_SLOT, key);
    $("key").value = "";
    showKeyState();
    loadSkills();
    loadSessions();
  });
  $("key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_SLOT);
    showKeyState();
    loadSkills();
  });
  for (const radio of document.querySelectorAll('input[name="mode"]')) radio.addEventListener("change", onMode);
  $("run").addEventListener("click", run);
  onMode();
  loadSkills();
  initWorkbench(); // workbench.js: sessions, uploads, the server's image
}

document.addEventListener("DOMContentLoaded", init);
