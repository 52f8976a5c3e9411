if (!window.__tlTraceInit) { window.__tlTraceInit = true; (function () {
  var R = /(\n)|([ \t]+)|(#[^|\n]*)(\|[^\n]*)|(#[^\n]*)|\b(def|del|return|import|None|True|False)\b|\b((?:aten|torch|operator)(?:\.\w+)+)|\b(fusion\d+)\b|('[^'\n]*'|"[^"\n]*")|(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(\w+)|([=*+-\/])|([\s\S])/y;
  var CLS = {3: 'c1', 4: 'cs', 5: 'c1', 6: 'k', 7: 'nf', 8: 'nc', 9: 's', 10: 'm', 12: 'o'};  // names, punctuation: plain
  function esc(t) { return t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;'); }  // as pygments
  function attr(t) { return esc(t).replace(/"/g, '&quot;').replace(/'/g, '&#x27;'); }
  function hl(line) {  // tokens of one class in a row are merged, as pygments' formatter does
    var out = '', m, cur = null, buf = '';
    function flush() { if (buf) { out += cur ? '<span class="' + cur + '">' + esc(buf) + '</span>' : esc(buf); } buf = ''; }
    R.lastIndex = 0;
    while (R.lastIndex < line.length && (m = R.exec(line))) {
      for (var g = 1; g < m.length; g++) {
        if (m[g] === undefined) { continue; }
        var c = CLS[g] || '';
        if (c !== cur) { flush(); cur = c; }
        buf += m[g];
      }
    }
    flush();
    return out;
  }
  function fb(n) {
    var u = [['GiB', 1073741824], ['MiB', 1048576], ['KiB', 1024]];
    for (var i = 0; i < 3; i++) { if (Math.abs(n) >= u[i][1]) { return (n / u[i][1]).toFixed(2) + ' ' + u[i][0]; } }
    return Math.trunc(n) + ' B';
  }
  function sums(xs) { var a = 0; return xs.map(function (x) { a += x; return a; }); }
  function field(d, st, key) {  // as stage_field in html.py: {"like": j, "set": [...]} or (delta-coded) data
    var v = st[key];
    if (v && !Array.isArray(v)) {
      var out = field(d, d.stages[v.like], key).slice();
      (v.set || []).forEach(function (p) { out[p[0]] = p[1]; });
      return out;
    }
    return key === 'idx' || key === 'ops' ? sums(v) : v;
  }
  function draw(d, st) {
    var out = [], L = d.lines, I = field(d, st, 'idx'), base = st.base, scale = st.scale, op = {}, fold = {}, rows = [];
    var mem = field(d, st, 'mem');
    field(d, st, 'ops').forEach(function (i, k) { op[i] = k; });
    var pfold = {};
    field(d, st, 'fold').forEach(function (f) { fold[f[0]] = f[1]; });
    (st.pfold ? field(d, st, 'pfold') : []).forEach(function (f) { fold[f[0]] = f[1]; pfold[f[0]] = true; });
    for (var i = 0; i < I.length; i++) {
      var n = fold[i] || 0; rows.push([i, op[i] === undefined ? -1 : op[i], n, !!pfold[i]]); i += n;
    }
    rows.forEach(function (r) {
      var i = r[0], k = r[1], n = r[2], params = r[3], m = k >= 0 ? mem[k] : null, bar, cls = 'tl-l';
      if (m) {
        var pct = (100 * Math.max(m[0] - base, 0) / scale).toFixed(1), hw = (100 * Math.max(m[1] - base, 0) / scale).toFixed(1);
        var tip = 'after ' + fb(m[0] - base) + ' (' + fb(m[0]) + ' incl. inputs), while it runs ' + fb(m[1] - base) +
          '; +' + fb(m[2]) + ' -' + fb(m[3]);
        bar = '<span class="tl-bar" title="' + attr(tip) + '"><b style="width:' + hw + '%"></b><i style="width:' + pct + '%"></i></span>';
        if (k === st.peak) { cls = 'tl-l tl-pk'; }
      } else { bar = '<span class="tl-bar tl-nb"></span>'; }
      var code = hl(L[I[i]]);
      if (n > 0) {
        var inner = '', kind = params ? 'tl-pin' : 'tl-inner';
        for (var j = i + 1; j <= i + n; j++) {
          inner += '<div class="tl-l ' + kind + '"><span class="tl-bar tl-nb"></span><code>' + hl(L[I[j]]) + '</code></div>';
        }
        var hint = params ? n + ' more input' + (n !== 1 ? 's' : '') : n + ' op' + (n !== 1 ? 's' : '');
        out.push('<details class="tl-region' + (params ? ' tl-params' : '') + '"><summary><div class="' + cls + '">' + bar +
                 '<code>' + code + '<span class="tl-fold">' + hint + '</span></code></div></summary>' + inner + '</details>');
      } else { out.push('<div class="' + cls + '">' + bar + '<code>' + code + '</code></div>'); }
    });
    return out.join('');
  }
  window.__tlTraceDraw = draw;  // (data, stage data) -> the rows' HTML, as code_html draws them
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest ? ev.target.closest('button.tl-all') : null;
    if (!b) { return; }
    var win = b.parentNode.nextElementSibling, full = win && win.nextElementSibling;
    var anchor = win.getAttribute('data-tla');
    function moveAnchor(from, to) {  // the jump-to-peak link targets the peak line of the view on display
      var a = anchor && from.querySelector('.tl-pk code'), b = anchor && to.querySelector('.tl-pk code');
      if (a && b) { a.removeAttribute('id'); b.id = anchor; }
    }
    if (full && full.classList.contains('tl-full')) {
      var show = full.style.display === 'none';
      full.style.display = show ? '' : 'none'; win.style.display = show ? 'none' : '';
      if (show) { moveAnchor(win, full); } else { moveAnchor(full, win); }
      b.textContent = show ? b.getAttribute('data-less') : b.getAttribute('data-more'); return;
    }
    var store = document.getElementById(win.getAttribute('data-tlp'));
    if (!store) { return; }
    b.disabled = true; b.textContent = 'unpacking\u2026';
    store.__tlData = store.__tlData || window.__tlInflate(store.getAttribute('data-tlz')).then(JSON.parse);
    store.__tlData.then(function (d) {
      var div = document.createElement('div');
      div.className = 'tl-code tl-full';
      div.innerHTML = draw(d, d.stages[+win.getAttribute('data-tls')]);
      win.parentNode.insertBefore(div, win.nextSibling); win.style.display = 'none'; moveAnchor(win, div);
      b.disabled = false; b.textContent = b.getAttribute('data-less');
    }).catch(function (e) { b.disabled = false; b.textContent = 'could not unpack: ' + e; });
  });
})(); }
