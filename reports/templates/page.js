function pkbCountImages() {
  var imgs = document.images, n = 0;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) n++; }
  document.body.dataset.imgsLoaded = String(n);
  document.body.dataset.imgsTotal = String(imgs.length);
}
window.addEventListener('load', pkbCountImages);
function pkbFilter(input, tableId) {
  var q = input.value.toLowerCase(), rows = document.getElementById(tableId).tBodies[0].rows;
  for (var i = 0; i < rows.length; i++) { rows[i].style.display = rows[i].textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none'; }
}
function pkbSort(th) {
  var table = th.closest('table'), body = table.tBodies[0], col = th.cellIndex;
  var dir = th.dataset.dir === 'asc' ? 'desc' : 'asc';
  Array.prototype.forEach.call(th.parentNode.cells, function (c) { delete c.dataset.dir; });
  th.dataset.dir = dir;
  var key = function (row) {
    var cell = row.cells[col], v = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    var n = parseFloat(v);
    return v !== '' && !isNaN(n) && isFinite(v) ? [0, n] : [v === '' ? 2 : 1, v.toLowerCase()];
  };
  var rows = Array.prototype.slice.call(body.rows);
  rows.sort(function (a, b) {
    var x = key(a), y = key(b);
    if (x[0] !== y[0]) return x[0] - y[0];  // numbers, then words, then empty cells, either way
    var c = x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0;
    return dir === 'asc' ? c : -c;
  });
  rows.forEach(function (r) { body.appendChild(r); });
}
function pkbMeasure() {
  var t = document.getElementById('cand-table');
  if (t) { document.body.dataset.candWidth = String(t.scrollWidth); document.body.dataset.candVisible = String(t.clientWidth); }
}
window.addEventListener('load', pkbMeasure);
