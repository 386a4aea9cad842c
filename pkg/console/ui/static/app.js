// knbox console: refreshes the live parts of a page in place and submits
// the namespace picker on change. The pages work without it.
(function () {
  "use strict";
  var interval = parseInt(document.body.dataset.interval || "0", 10);
  document.querySelectorAll("[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });
  if (!interval || !document.querySelector("[data-refresh]")) { return; }
  interval = Math.max(interval, 1000);
  var busy = false;
  function refresh() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.redirected || !r.ok) { throw new Error("status " + r.status); }
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelectorAll("[data-refresh]");
        var old = document.querySelectorAll("[data-refresh]");
        if (fresh.length !== old.length) { return; }
        old.forEach(function (el, i) { el.replaceWith(document.importNode(fresh[i], true)); });
      })
      .catch(function () {})
      .finally(function () { busy = false; });
  }
  setInterval(refresh, interval);
})();
