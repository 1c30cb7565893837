// Jobdesk dashboard glue, loaded as a static file so the CSP can forbid inline script
// and eval. It does three things htmx cannot express without eval:
//  1. sends the CSRF token (from <meta name="csrf-token">) on every htmx request;
//  2. pauses polling ([data-poll] elements) while the tab is hidden, and refreshes
//     them once when it becomes visible again; skips a poll while the operator is
//     working inside the polled element (typing a reason, focus on a button), so a
//     refresh never throws away what they typed;
//  3. "select all" checkboxes for bulk actions ([data-check-all="form-id"]), and an
//     inline message instead of a round trip when "… selected" is pressed with no box
//     ticked;
//  4. the phone menu button, and keyboard access to tables wider than the screen;
//  5. tells the server the browser's time zone (a cookie), for viewers who have not
//     chosen one in their settings.
//  6. a list refused with 400 ("Bad filter: payload …") is shown: htmx leaves error
//     responses unswapped, which would leave the old rows under a filter they ignore.
(function () {
  "use strict";

  // The server renders every time in the viewer's zone: their setting, else the zone
  // this cookie reports, else UTC. A browser's first page comes before the cookie and
  // says UTC; that page is reloaded once so its times match every later one. Re-drawing
  // the times here instead would disagree with the server-rendered htmx fragments that
  // replace them a few seconds later. The reload cannot loop: it happens only when the
  // cookie reads back (cookies work), the page shows times, it was a GET (never re-post
  // a form), and at most once per zone per tab (sessionStorage) — a zone the server
  // does not know renders UTC again and stays that way.
  (function reportZone() {
    var zone;
    try {
      zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    } catch (error) {
      return;
    }
    if (!zone || !/^[A-Za-z0-9_+\-\/]{1,64}$/.test(zone)) {
      return;
    }
    var meta = document.querySelector('meta[name="jobdesk-zone"]');
    var path = (meta && meta.getAttribute("data-cookie-path")) || "/";
    if (readCookie("jobdesk_tz") !== zone) {
      document.cookie = "jobdesk_tz=" + zone + "; path=" + path + "; max-age=31536000; samesite=lax" +
        (window.location.protocol === "https:" ? "; secure" : "");
    }
    if (!meta || meta.getAttribute("data-source") === "setting" ||
        meta.getAttribute("content") === zone || !meta.hasAttribute("data-reloadable") ||
        readCookie("jobdesk_tz") !== zone) {
      return;
    }
    // Deferred: the document is parsed, so whether it shows any time is known.
    if (!document.querySelector("time[datetime]")) {
      return;
    }
    var key = "jobdesk-zone-reloaded";
    try {
      if (window.sessionStorage.getItem(key) === zone) {
        return;
      }
      window.sessionStorage.setItem(key, zone);
    } catch (error) {
      return;
    }
    window.location.reload();
  })();

  function readCookie(name) {
    var parts = document.cookie ? document.cookie.split("; ") : [];
    for (var i = 0; i < parts.length; i++) {
      if (parts[i].indexOf(name + "=") === 0) {
        return parts[i].slice(name.length + 1);
      }
    }
    return null;
  }

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

  // True while the operator is in the middle of something inside `elt`: focus on one of
  // its form controls, or a text field whose value differs from what the page served.
  function busyInside(elt) {
    var active = document.activeElement;
    if (active && active !== elt && elt.contains(active) &&
        active.matches("input, textarea, select, button")) {
      return true;
    }
    var fields = elt.querySelectorAll("input[type=text], input[type=search], textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== fields[i].defaultValue) {
        return true;
      }
    }
    return false;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (event.detail.xhr.status === 400 && target && target.id === "job-results") {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) {
      return;
    }
    if (document.hidden || busyInside(elt)) {
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

  // "Retry selected…" with nothing ticked: say so next to the buttons (capture phase,
  // before htmx's boosted submit). Without JavaScript the server answers the same.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form || form.id !== "bulk-form" || form.querySelector('input[name="ids"]:checked')) {
      return;
    }
    event.preventDefault();
    event.stopPropagation();
    var submitter = event.submitter;
    var bar = (submitter && submitter.closest(".bulkbar")) || form;
    var message = form.querySelector(".selection-empty");
    if (!message) {
      message = document.createElement("p");
      message.className = "flash flash-error selection-empty";
      message.setAttribute("role", "alert");
      if (bar === form) {
        form.appendChild(message);
      } else {
        bar.insertAdjacentElement("afterend", message);
      }
    }
    var verb = submitter && submitter.value === "ignore" ? "Ignore" : "Retry";
    message.textContent = "Nothing selected: tick the jobs to act on, then press " + verb +
      " selected again.";
  }, true);

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

  // Ticking a box clears the "nothing selected" message.
  document.addEventListener("change", function (event) {
    var box = event.target;
    var form = box && box.closest && box.closest("#bulk-form");
    var message = form && form.querySelector(".selection-empty");
    if (message && form.querySelector('input[name="ids"]:checked')) {
      message.remove();
    }
  });
})();
