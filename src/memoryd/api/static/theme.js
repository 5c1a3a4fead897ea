/* The page's theme, set before the first paint (so a dark page never flashes white): the
 * choice kept in localStorage (`memoryd.theme`: light or dark), else the system's. home.js
 * switches it. A file, not an inline script: the CSP allows only the page's own scripts. */
(function () {
  "use strict";
  let theme = null;
  try {
    theme = localStorage.getItem("memoryd.theme");
  } catch (_) {
    theme = null;
  }
  if (theme !== "light" && theme !== "dark") {
    theme = window.matchMedia && matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  document.documentElement.dataset.theme = theme;
})();
