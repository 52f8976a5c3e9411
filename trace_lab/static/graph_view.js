// trace_lab's graph widget (anywidget ESM, vendored: no network). Draws the before/after SVGs that the
// kernel laid out with Graphviz's `dot`, each in a pane that fits it on open; buttons (+, -, fit, 1:1),
// the wheel (zoom at the cursor) and a drag (pan) move it; a click on a node or a fused region shows its
// tooltip (op, type, source line) below; "side by side" / "before" / "after" choose the panes; "earlier"
// / "later" move the window of a large graph (the kernel redraws it). A graph too large to read at fit
// comes as an overview of blocks of lines (node ids blk_<start>_<stop>): a click on a block asks the
// kernel to open it in that pane; "◀ back" returns.
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function tipOf(target) {
  const g = target.closest ? target.closest("g.node, g.cluster") : null;
  if (!g) return null;
  const a = g.querySelector("a");
  const t = a && (a.getAttribute("xlink:title") || a.getAttribute("title"));
  if (t) return t;
  const title = g.querySelector("title");
  return title ? title.textContent : null;
}

function blockOf(target) {
  const g = target.closest ? target.closest("g.node") : null;
  const title = g && g.querySelector("title");
  const m = title && /^blk_(\d+)_(\d+)$/.exec(title.textContent.trim());
  return m ? [Number(m[1]), Number(m[2])] : null;
}

function makePane(p, height, onTip, send) {
  const pane = el("div", "tl-gw-pane");
  const head = el("h4", "tl-gw-title", p.title || "");
  if (p.back) {
    const back = el("button", "tl-gw-back", "◀ back");
    back.title = "back to the overview";
    back.onclick = () => send({ back: p.side });
    head.prepend(back);
  }
  pane.appendChild(head);
  const view = el("div", "tl-gw-view");
  view.style.height = height + "px";
  const stage = el("div", "tl-gw-stage");
  view.appendChild(stage);
  pane.appendChild(view);
  if (p.note) pane.appendChild(el("div", "tl-gw-note", p.note));
  const st = { s: 1, x: 0, y: 0, w: 1, h: 1 };
  if (p.svg) {
    stage.innerHTML = p.svg;  // laid out by dot from labels escaped when the DOT was built
    const svg = stage.querySelector("svg");
    const vb = svg && svg.viewBox && svg.viewBox.baseVal;
    st.w = (vb && vb.width) || 100;
    st.h = (vb && vb.height) || 100;
    svg.setAttribute("width", st.w);
    svg.setAttribute("height", st.h);
  } else {
    const pre = el("pre", "tl-gw-dot", p.dot || "");
    stage.appendChild(pre);
  }
  const apply = () => { stage.style.transform = `translate(${st.x}px, ${st.y}px) scale(${st.s})`;
                        pane.dataset.scale = String(st.s); };
  let fitted = false;  // fitted once with a real size; later visibility changes keep the user's zoom
  const fit = () => {
    const W = view.clientWidth || 400, H = view.clientHeight || height;
    fitted = fitted || view.clientWidth > 0;
    st.s = Math.min(W / st.w, H / st.h);
    st.x = (W - st.w * st.s) / 2; st.y = (H - st.h * st.s) / 2; apply();
  };
  const fitOnce = () => { if (!fitted) fit(); };
  const zoom = (f, cx, cy) => {
    const W = view.clientWidth, H = view.clientHeight;
    if (cx === undefined) { cx = W / 2; cy = H / 2; }
    const s = Math.max(0.02, Math.min(8, st.s * f)), k = s / st.s;
    st.x = cx - (cx - st.x) * k; st.y = cy - (cy - st.y) * k; st.s = s; apply();
  };
  const actual = () => { st.s = 1; st.x = 0; st.y = 0; apply(); };
  view.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = view.getBoundingClientRect();
    zoom(e.deltaY < 0 ? 1.15 : 1 / 1.15, e.clientX - r.left, e.clientY - r.top);
  }, { passive: false });
  let drag = null;
  view.addEventListener("pointerdown", (e) => {
    e.preventDefault();  // no text selection, no panel scroll
    drag = { x: e.clientX, y: e.clientY, ox: st.x, oy: st.y, moved: false };
    view.setPointerCapture(e.pointerId);
  });
  view.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    st.x = drag.ox + dx; st.y = drag.oy + dy; apply();
  });
  view.addEventListener("pointerup", (e) => {
    const wasClick = drag && !drag.moved;
    drag = null;
    if (wasClick) {
      view.releasePointerCapture(e.pointerId);
      const hit = document.elementFromPoint(e.clientX, e.clientY);
      const tip = hit ? tipOf(hit) : null;
      if (tip !== null) onTip(tip);
      const block = hit ? blockOf(hit) : null;
      if (block) send({ open: { side: p.side, start: block[0], stop: block[1] } });
    }
  });
  return { pane, fit, fitOnce, zoom, actual };
}

function render({ model, el: root }) {
  root.classList.add("tl-gw");
  const bar = el("div", "tl-gw-bar");
  const modes = [["both", "side by side"], ["before", "before"], ["after", "after"]];
  const modeButtons = modes.map(([m, label]) => {
    const b = el("button", "tl-gw-mode", label);
    b.dataset.mode = m;
    b.onclick = () => { model.set("mode", m); model.save_changes(); };
    bar.appendChild(b);
    return b;
  });
  bar.appendChild(el("span", "tl-gw-sep", "·"));
  let panes = [];
  const tools = [["+", "zoom in", (p) => p.zoom(1.25)], ["-", "zoom out", (p) => p.zoom(0.8)],
                 ["fit", "fit the panel", (p) => p.fit()], ["1:1", "actual size", (p) => p.actual()]];
  for (const [label, title, fn] of tools) {
    const b = el("button", "tl-gw-tool", label);
    b.title = title;
    b.dataset.tool = label;
    b.onclick = () => panes.forEach(fn);
    bar.appendChild(b);
  }
  const win = el("span", "tl-gw-window");
  const earlier = el("button", "tl-gw-earlier", "◀ earlier lines");
  const later = el("button", "tl-gw-later", "later lines ▶");
  const winText = el("span", "tl-gw-window-text");
  earlier.onclick = () => model.send({ move: -1 });
  later.onclick = () => model.send({ move: 1 });
  win.append(earlier, winText, later);
  bar.appendChild(win);
  const body = el("div", "tl-gw-panes");
  const info = el("div", "tl-gw-info", "click a node or a fused region for its op, type and source line");
  root.append(bar, body, info);

  const draw = () => {
    body.innerHTML = "";
    const mode = model.get("mode");
    modeButtons.forEach((b) => b.classList.toggle("tl-gw-on", b.dataset.mode === mode));
    const all = model.get("panes") || [];
    const shown = all.filter((p) => mode === "both" || p.side === mode);
    body.dataset.count = String(shown.length);
    panes = shown.map((p) => makePane(p, model.get("height"), (tip) => {
      info.textContent = tip; model.set("selected", tip); model.save_changes();
    }, (msg) => model.send(msg)));
    panes.forEach((p) => body.appendChild(p.pane));
    const w = model.get("window") || {};
    win.style.display = w.total ? "" : "none";
    if (w.total) {
      winText.textContent = ` lines ${w.first}-${w.last} of ${w.total} `;
      earlier.disabled = w.first <= 0; later.disabled = w.last >= w.total - 1;
    }
    requestAnimationFrame(() => panes.forEach((p) => p.fitOnce()));
  };
  model.on("change:panes", draw);
  model.on("change:mode", draw);
  model.on("change:window", draw);
  model.on("change:selected", () => { const t = model.get("selected"); if (t) info.textContent = t; });
  draw();
  // a pane in a hidden tab has no size yet: fit it when the widget first becomes visible
  const io = new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting)) panes.forEach((p) => p.fitOnce());
  });
  io.observe(root);
  return () => io.disconnect();
}

export default { render };
