// The playground's sessions, file uploads and server status, over the same JSON-RPC API
// (app.js holds rpc() and the run; this file is loaded first and app.js calls in here).
// Sessions: create one, run in it (its globals carry over), see it listed, close it.
// Uploads: a file read in the browser, sent as base64 to create_blob, its id added to the
// run's input_blobs (the run reads it at /blobs/<id>). Status: the image the server serves
// and, while the data image is made in the background, how far that is (GET /healthz).
"use strict";

const MAX_UPLOAD_BYTES = 8 * 1024 * 1024; // the server's body limit is 10 MiB; base64 adds a third
const STATUS_EVERY_MS = 5000;

function chosenSession() {
  return document.getElementById("session-pick").value || null;
}

function inputBlobs() {
  return document.getElementById("blobs").value.split(",").map((s) => s.trim()).filter(Boolean);
}

async function loadSessions(keep) {
  const pick = document.getElementById("session-pick");
  const list = document.getElementById("sessions");
  const state = document.getElementById("sessions-state");
  const wanted = keep === undefined ? pick.value : keep;
  let sessions = [];
  try {
    sessions = (await rpc("list_sessions", {})).sessions;
  } catch (err) {
    state.textContent = `cannot list sessions: ${err.message}`;
    return;
  }
  list.replaceChildren();
  pick.replaceChildren(new Option("no session (a fresh sandbox)", ""));
  for (const s of sessions) {
    pick.append(new Option(s.session_id, s.session_id));
    const item = document.createElement("li");
    item.dataset.session = s.session_id;
    const label = document.createElement("code");
    label.textContent = s.session_id;
    const about = document.createElement("small");
    about.textContent = ` ${s.runs} run${s.runs === 1 ? "" : "s"}, ${Math.round(s.memory_bytes / 1048576)} MB`;
    const close = document.createElement("button");
    close.type = "button";
    close.className = "session-close";
    close.textContent = "close";
    close.addEventListener("click", () => closeSession(s.session_id));
    item.append(label, about, close);
    list.append(item);
  }
  pick.value = sessions.some((s) => s.session_id === wanted) ? wanted : "";
  state.textContent = `${sessions.length} open`;
}

async function newSession() {
  const state = document.getElementById("sessions-state");
  try {
    const made = await rpc("create_session", { language: "python" });
    await loadSessions(made.session_id);
  } catch (err) {
    state.textContent = `cannot open a session: ${err.message}`;
  }
}

async function closeSession(id) {
  try {
    await rpc("close_session", { session_id: id });
  } catch (err) {
    document.getElementById("sessions-state").textContent = `cannot close ${id}: ${err.message}`;
  }
  await loadSessions();
}

function base64Of(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

async function upload() {
  const input = document.getElementById("upload");
  const state = document.getElementById("upload-state");
  const file = input.files && input.files[0];
  if (!file) {
    state.textContent = "choose a file first";
    return;
  }
  if (file.size > MAX_UPLOAD_BYTES) {
    state.textContent = `${file.name} is ${file.size} bytes; the playground uploads at most ${MAX_UPLOAD_BYTES}`;
    return;
  }
  state.textContent = `uploading ${file.name}...`;
  try {
    const content = base64Of(await file.arrayBuffer());
    const kind = file.type || "application/octet-stream";
    const made = await rpc("create_blob", { content, kind, encoding: "base64" });
    const blobs = document.getElementById("blobs");
    blobs.value = [...inputBlobs(), made.blob_id].join(", ");
    state.textContent = `${file.name}: ${made.blob_id} (${made.size_bytes} bytes), at /blobs/${made.blob_id} in a run`;
  } catch (err) {
    state.textContent = `cannot upload ${file.name}: ${err.message}`;
  }
}

async function showServerStatus() {
  const state = document.getElementById("server-image");
  let image;
  try {
    image = (await (await fetch("/healthz")).json()).image;
  } catch (_) {
    state.textContent = "";
    return;
  }
  if (!image) return;
  const warming = image.warming_up;
  state.textContent = warming
    ? `image: ${image.serving}; the ${warming.image} image is being made (${warming.seconds_so_far} s so far,` +
      ` about ${warming.seconds_left} s left${warming.measured ? "" : ", a first guess"})`
    : `image: ${image.serving}`;
  if (warming) setTimeout(showServerStatus, STATUS_EVERY_MS);
}

function initWorkbench() {
  document.getElementById("session-new").addEventListener("click", newSession);
  document.getElementById("upload-send").addEventListener("click", upload);
  loadSessions();
  showServerStatus();
}
