// Jobdesk dashboard glue, loaded as a static file so the CSP can forbid inline script
// and eval. It does three things htmx cannot express without eval:
//  1. sends the CSRF token (from <meta name="csrf-token">) on every htmx request;
//  2. pauses polling ([data-poll] elements) while the tab is hidden, and refreshes
//     them once when it becomes visible again;
//  3. "select all" checkboxes for bulk actions ([data-check-all="form-id"]);
//  4. the phone menu button, and keyboard access to tables wider than the screen.
(function () {
  "use strict";

  // The phone layout hides the navigation behind the menu button only when this script
  // runs; without JavaScript the links wrap and stay visible.
  document.documentElement.classList.add("js");

  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest && event.target.closest(".menu-toggle");
    if (!button) {
      return;
    }
    var open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", open ? "true" : "false");
    button.closest(".topbar").classList.toggle("open", open);
  });

  // A table or text block that scrolls must be reachable by keyboard (Tab, then arrows).
  function focusableScrollers(root) {
    (root || document).querySelectorAll(".table-wrap, pre.block, pre.inline-error").forEach(function (wrap) {
      if (wrap.scrollWidth > wrap.clientWidth + 1 || wrap.scrollHeight > wrap.clientHeight + 1) {
        wrap.setAttribute("tabindex", "0");
        if (!wrap.hasAttribute("aria-label")) {
          var caption = wrap.closest("section, .panel");
          var heading = caption && caption.querySelector("h2, h3");
          wrap.setAttribute("aria-label", (heading ? heading.textContent.trim() + ", " : "") +
            (wrap.tagName === "PRE" ? "text, scrolls" : "table, scrolls sideways"));
        }
        if (!wrap.hasAttribute("role")) {
          wrap.setAttribute("role", "region");
        }
      } else if (wrap.getAttribute("tabindex") === "0") {
        wrap.removeAttribute("tabindex");
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { focusableScrollers(); });
  document.addEventListener("htmx:afterSettle", function () { focusableScrollers(); });
  window.addEventListener("resize", function () { focusableScrollers(); });

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
