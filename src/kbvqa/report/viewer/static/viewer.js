// kbvqa view: the only script. In a static export the search box cannot ask a server, so it opens
// the record page of the output being viewed, whose file name is the id's UTF-8 bytes in hex
// (kbvqa.report.viewer.site.rid_slug computes the same).
(function () {
  "use strict";
  function fnv1a32(bytes) {
    var h = 0x811c9dc5;
    for (var i = 0; i < bytes.length; i++) { h ^= bytes[i]; h = Math.imul(h, 0x01000193) >>> 0; }
    return ("0000000" + h.toString(16)).slice(-8);
  }
  function hex(bytes) {
    var s = "";
    for (var i = 0; i < bytes.length; i++) { s += ("0" + bytes[i].toString(16)).slice(-2); }
    return s;
  }
  function ridSlug(id) {
    var b = new TextEncoder().encode(id);
    return b.length <= 100 ? hex(b) : hex(b.slice(0, 50)) + "-" + fnv1a32(b);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var body = document.body, form = document.getElementById("search-form");
    if (!form || body.dataset.staticBase === undefined) { return; }
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var id = document.getElementById("search-id").value, oid = body.dataset.oid;
      if (!oid) { alert("Open an output first: the exported site searches the output being viewed."); return; }
      window.location.href = body.dataset.staticBase + "o/" + oid + "/r/" + ridSlug(id) + ".html";
    });
  });
})();
