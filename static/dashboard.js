// Jobdesk dashboard glue, loaded as a static file so the CSP can forbid inline script
// and eval. It does three things htmx cannot express without eval:
//  1. sends the CSRF token (from <meta name="csrf-token">) on every htmx request;
//  2. pauses polling ([data-poll] elements) while the tab is hidden, and refreshes
//     them once when it becomes visible again;
//  3. "select all" checkboxes for bulk actions ([data-check-all="form-id"]).
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-CSRF-Token"] = csrfToken();
  });

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (document.hidden && elt && elt.hasAttribute && elt.hasAttribute("data-poll")) {
      event.preventDefault();
    }
  });

  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) {
      return;
    }
    document.querySelectorAll("[data-poll]").forEach(function (elt) {
      window.htmx.trigger(elt, "jobdesk:visible");
    });
  });

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box || !box.matches || !box.matches("[data-check-all]")) {
      return;
    }
    var form = document.getElementById(box.getAttribute("data-check-all"));
    if (!form) {
      return;
    }
    form.querySelectorAll('input[type="checkbox"][name="ids"]').forEach(function (item) {
      item.checked = box.checked;
    });
  });
})();
