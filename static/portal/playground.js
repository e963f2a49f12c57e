// The playground: one websocket per page; a prompt goes out, token frames come back per pane.
// Whenever the socket opens (first, or again after a drop) its first frame says what the picker
// offers now, so a version released after the page was drawn can be picked without a reload.
(function () {
  "use strict";
  const root = document.getElementById("playground");
  if (!root) return;
  const form = document.getElementById("playground-form");
  const state = document.getElementById("playground-state");
  const banner = document.getElementById("playground-error");
  const send = document.getElementById("playground-send");
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const busy = new Set();
  let socket = null;

  function pane(i) {
    const el = document.getElementById("pane-" + i);
    const part = (name) => el.querySelector('[data-testid="pane-' + i + "-" + name + '"]');
    return { el, part };
  }
  function setBusy(on) { send.disabled = on || !socket || socket.readyState !== WebSocket.OPEN; }
  function showError(box, frame) {
    box.textContent = frame.code + ": " + frame.message;
    box.hidden = false;
  }
  function fmt(value, digits) { return value === null || value === undefined ? "–" : value.toFixed(digits); }

  // The pickers rebuilt from the server's list, keeping each one's choice where it is offered.
  function offer(choices) {
    [["pick-0", false], ["pick-1", true]].forEach(function ([id, withNothing]) {
      const select = document.getElementById(id);
      const kept = select.value;
      const options = withNothing ? [["", "nothing"]] : [];
      choices.forEach((c) => options.push([c.key, c.label + (c.status === "staged" ? " (staged)" : "")]));
      select.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
      if (options.some(([value]) => value === kept)) select.value = kept;
    });
  }

  function connect() {
    socket = new WebSocket(scheme + location.host + root.dataset.socket);
    socket.addEventListener("open", () => { state.textContent = "connected"; setBusy(busy.size > 0); });
    socket.addEventListener("close", (e) => {
      state.textContent = "disconnected (" + e.code + ")";
      // A reply under way is lost with its socket: say so in its pane.
      busy.forEach((i) => {
        showError(pane(i).part("error"), { code: "playground.disconnected", message: "The connection dropped; send again." });
        pane(i).el.dataset.done = "true";
      });
      busy.clear();
      setBusy(true);
      if (e.code >= 4400 && e.code < 4500) return; // refused or revoked: do not knock again
      setTimeout(connect, 3000);
    });
    socket.addEventListener("message", receive);
  }

  function receive(event) {
    const frame = JSON.parse(event.data);
    if (frame.type === "choices") {
      offer(frame.choices);
      return;
    }
    if (frame.pane === null || frame.pane === undefined) {
      if (frame.type === "error") showError(banner, frame);
      return;
    }
    const p = pane(frame.pane);
    if (frame.type === "start") {
      p.el.hidden = false;
      p.part("model").textContent = frame.model;
    } else if (frame.type === "token") {
      const reply = p.part("reply");
      reply.textContent += frame.text;
      reply.dataset.frames = String(Number(reply.dataset.frames || 0) + 1);
      p.part("tokens").textContent = reply.dataset.frames;
    } else if (frame.type === "done") {
      p.part("ttft").textContent = fmt(frame.ttft_ms, 1);
      p.part("tps").textContent = fmt(frame.tokens_per_s, 1);
      p.part("tokens").textContent = String(frame.tokens);
      p.el.dataset.done = "true";
    } else if (frame.type === "error") {
      showError(p.part("error"), frame);
      p.el.dataset.done = "true";
    }
    if (frame.type === "done" || frame.type === "error") {
      busy.delete(frame.pane);
      if (busy.size === 0) setBusy(false);
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const models = [data.get("model")];
    if (data.get("compare")) models.push(data.get("compare"));
    banner.hidden = true;
    [0, 1].forEach((i) => {
      const p = pane(i);
      p.el.hidden = i >= models.length;
      delete p.el.dataset.done;
      const reply = p.part("reply");
      reply.textContent = "";
      reply.dataset.frames = "0";
      ["ttft", "tps"].forEach((n) => { p.part(n).textContent = "–"; });
      p.part("tokens").textContent = "0";
      p.part("error").hidden = true;
      if (i < models.length) busy.add(i);
    });
    setBusy(true);
    socket.send(JSON.stringify({
      prompt: data.get("prompt"),
      models: models,
      max_tokens: Number(data.get("max_tokens") || 64),
      // Left empty: the engine's default sampling (JSON.stringify drops an undefined field).
      temperature: data.get("temperature") ? Number(data.get("temperature")) : undefined,
    }));
  });
  setBusy(true);
  connect();
})();
