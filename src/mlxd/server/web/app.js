// mlxd's chat page: talks to this server's /v1 like any client. Model text is only ever
// set as textContent (never parsed as HTML), so a model cannot inject markup or script.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_SLOT = "mlxd-api-key"; // sessionStorage: the key lives as long as this tab
const turns = []; // the conversation sent with every request (OpenAI messages)
let images = []; // data: URLs attached to the next message
let controller = null; // AbortController of the answer being streamed

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem(KEY_SLOT);
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

async function errorText(response) {
  // The server's error bodies are {"error": {"message": ...}}; anything else is shown raw.
  const body = await response.text();
  try {
    return JSON.parse(body).error.message || body;
  } catch (_) {
    return body || response.statusText;
  }
}

async function refused(response) {
  if (response.status === 401) {
    $("keybox").hidden = false;
    $("key").focus();
    return "The server needs an API key: enter it above, then send again.";
  }
  return `Error ${response.status}: ${await errorText(response)}`;
}

async function loadModels() {
  let response;
  try {
    response = await fetch("/v1/models", { headers: headers() });
  } catch (err) {
    notice("Cannot reach the server: " + err.message);
    return;
  }
  if (!response.ok) {
    notice(await refused(response));
    return;
  }
  const select = $("model");
  const current = select.value;
  select.replaceChildren();
  for (const model of (await response.json()).data) {
    const option = document.createElement("option");
    option.value = option.textContent = model.id;
    select.append(option);
  }
  if (current) select.value = current;
  if (!select.value && select.options.length) select.selectedIndex = 0;
  notice(select.options.length ? "" : "No models: start mlxd serve with --model.");
}

// Text with ``` fences becomes text runs and <pre><code> blocks, all as textContent.
function renderText(target, text) {
  target.replaceChildren();
  const parts = text.split("```");
  parts.forEach((part, i) => {
    if (i % 2 === 0) {
      // The newlines next to a fence belong to the fence, not to the text around it.
      if (i > 0) part = part.replace(/^\n/, "");
      if (i < parts.length - 1) part = part.replace(/\n$/, "");
      if (part) target.append(document.createTextNode(part));
      return;
    }
    const newline = part.indexOf("\n");
    const pre = document.createElement("pre");
    const code = document.createElement("code");
    const lang = newline > 0 ? part.slice(0, newline).trim() : "";
    if (/^[\w+#.-]+$/.test(lang)) code.dataset.lang = lang;
    code.textContent = newline >= 0 ? part.slice(newline + 1) : part;
    pre.append(code);
    target.append(pre);
  });
}

function bubble(role) {
  const el = document.createElement("div");
  el.className = "msg " + role;
  const text = document.createElement("div");
  text.className = "text";
  el.append(text);
  $("log").append(el);
  return el;
}

function showUser(text, urls) {
  const el = bubble("user");
  el.querySelector(".text").textContent = text;
  for (const url of urls) {
    const img = document.createElement("img");
    img.src = url;
    img.alt = "attached image";
    el.append(img);
  }
}

function reasoningBox(el) {
  let box = el.querySelector("details.reasoning");
  if (!box) {
    box = document.createElement("details");
    box.className = "reasoning";
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    const text = document.createElement("div");
    text.className = "thoughts";
    box.append(summary, text);
    el.prepend(box);
  }
  return box.querySelector(".thoughts");
}

// Server-sent events from a fetch body: yields each `data:` payload (JSON text).
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:"));
      if (data.length) yield data.map((l) => l.slice(5).trimStart()).join("\n");
    }
  }
}

function userContent(text, urls) {
  if (!urls.length) return text;
  const parts = urls.map((url) => ({ type: "image_url", image_url: { url } }));
  return text ? [{ type: "text", text }, ...parts] : parts;
}

function requestBody() {
  const system = $("system").value.trim();
  const messages = system ? [{ role: "system", content: system }, ...turns] : turns;
  const body = {
    model: $("model").value || "default",
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  const maxTokens = parseInt($("max-tokens").value, 10);
  if (maxTokens > 0) body.max_tokens = maxTokens;
  return JSON.stringify(body);
}

function showStats(usage, started, firstToken) {
  if (!usage) return;
  const seconds = (performance.now() - (firstToken || started)) / 1000;
  const rate = seconds > 0 ? (usage.completion_tokens / seconds).toFixed(1) : "-";
  $("stats").textContent =
    `prompt ${usage.prompt_tokens} tokens, answer ${usage.completion_tokens} tokens, ${rate} tokens/s`;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  document.body.dataset.state = busy ? "streaming" : "idle";
}

// Fills `answer` as deltas arrive, so a stopped answer keeps what it had.
async function readAnswer(response, el, started, answer) {
  for await (const data of events(response)) {
    if (data === "[DONE]") break;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message || "the server ended the answer");
    if (chunk.usage) answer.usage = chunk.usage;
    const delta = (chunk.choices && chunk.choices[0] && chunk.choices[0].delta) || {};
    if (delta.reasoning_content) {
      answer.reasoning += delta.reasoning_content;
      reasoningBox(el).textContent = answer.reasoning;
    }
    if (delta.content) {
      answer.firstToken = answer.firstToken || performance.now();
      answer.text += delta.content;
      renderText(el.querySelector(".text"), answer.text);
    }
  }
  showStats(answer.usage, started, answer.firstToken);
}

async function send() {
  const text = $("prompt").value.trim();
  if ((!text && !images.length) || controller) return;
  const urls = images;
  turns.push({ role: "user", content: userContent(text, urls) });
  showUser(text, urls);
  $("prompt").value = "";
  images = [];
  $("attached").replaceChildren();
  $("image").value = "";
  notice("");
  const el = bubble("assistant");
  controller = new AbortController();
  setBusy(true);
  const started = performance.now();
  const answer = { text: "", reasoning: "", usage: null, firstToken: 0 };
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: requestBody(), signal: controller.signal,
    });
    if (!response.ok) throw new Error(await refused(response));
    await readAnswer(response, el, started, answer);
  } catch (err) {
    if (err.name === "AbortError") {
      $("stats").textContent = "stopped";
    } else {
      el.classList.add("error");
      el.querySelector(".text").textContent = err.message;
    }
  } finally {
    // A turn with no answer is dropped (send it again); a partial answer stays.
    if (answer.text) turns.push({ role: "assistant", content: answer.text });
    else turns.pop();
    controller = null;
    setBusy(false);
  }
}

function attach(files) {
  for (const file of files) {
    const reader = new FileReader();
    reader.onload = () => {
      images.push(reader.result);
      const img = document.createElement("img");
      img.src = reader.result;
      img.alt = file.name;
      $("attached").append(img);
    };
    reader.readAsDataURL(file);
  }
}

function init() {
  $("send").addEventListener("click", send);
  $("stop").addEventListener("click", () => controller && controller.abort());
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      send();
    }
  });
  $("clear").addEventListener("click", () => {
    if (controller) controller.abort();
    turns.length = 0;
    $("log").replaceChildren();
    $("stats").textContent = "";
  });
  $("image").addEventListener("change", (e) => attach(e.target.files));
  $("keybox").addEventListener("submit", (e) => {
    e.preventDefault(); // the key stays in this tab: nothing is submitted anywhere
    sessionStorage.setItem(KEY_SLOT, $("key").value.trim());
    $("key").value = "";
    $("keybox").hidden = true;
    loadModels();
  });
  setBusy(false);
  loadModels();
}

document.addEventListener("DOMContentLoaded", init);
