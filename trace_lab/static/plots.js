document.querySelectorAll('.tl-svgz:not([data-tld])').forEach(function (el) {
  el.setAttribute('data-tld', '1');
  window.__tlInflate(el.getAttribute('data-tlz')).then(function (svg) { el.innerHTML = svg; })
    .catch(function (e) { el.textContent = 'could not unpack the plot: ' + e; });
});
