// usermem console: open/close the confirmation dialogs (delegated, so it works after htmx swaps).
// No inline scripts anywhere (the pages send a strict Content-Security-Policy).
(function () {
  "use strict";
  document.addEventListener("click", function (ev) {
    var target = ev.target instanceof Element ? ev.target : null;
    if (!target) { return; }
    var opener = target.closest("[data-open-dialog]");
    if (opener) {
      var dialog = document.getElementById(opener.getAttribute("data-open-dialog"));
      if (dialog && typeof dialog.showModal === "function") {
        ev.preventDefault();
        dialog.showModal();
        var first = dialog.querySelector("input:not([type=hidden])");
        if (first) { first.focus(); }
      }
      return;
    }
    var closer = target.closest("[data-close-dialog]");
    if (closer) {
      var d = closer.closest("dialog");
      if (d) { d.close(); }
    }
  });
  // Move focus to the new page's main region after an htmx navigation (keyboard and screen-reader users).
  document.addEventListener("htmx:afterSettle", function (ev) {
    var main = document.getElementById("main");
    if (main && ev.detail && ev.detail.boosted) { main.focus({ preventScroll: false }); }
  });
})();
