/* The memoryd API docs: Swagger UI over this daemon's /openapi.json.
 *
 * Auth works as on the graph page (app.js): on TCP the daemon wants
 * `Authorization: Bearer <token>`. `memoryd ui --docs` opens `/docs#token=…`; the fragment never
 * reaches the server, and the token moves into sessionStorage (this tab only; the graph page
 * and this page share it, so its "API" link needs no token either) and out of the address bar.
 * Swagger UI's requestInterceptor adds the header to the OpenAPI fetch and to every "Try it
 * out" request, and only to requests for this origin.
 *
 * For tests, the Swagger UI instance is `window.memorydDocs`.
 */
(function () {
  "use strict";

  const TOKEN_KEY = "memoryd.token";

  /** Move a #token=… into sessionStorage and out of the address bar and the history. */
  function takeToken() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ""));
    const token = params.get("token");
    if (token !== null) {
      sessionStorage.setItem(TOKEN_KEY, token);
      params.delete("token");
      const rest = params.toString();
      history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function notice(text) {
    const box = document.getElementById("docs-notice");
    box.textContent = text;
    box.hidden = false;
  }

  const token = takeToken();
  if (!token) {
    notice("No token in this tab: open the docs with `memoryd ui --docs` (or the API link of the page `memoryd ui` opens).");
  }

  window.memorydDocs = window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    presets: [window.SwaggerUIBundle.presets.apis],
    deepLinking: false,
    validatorUrl: null,
    requestInterceptor: function (request) {
      if (token && new URL(request.url, location.href).origin === location.origin) {
        request.headers.Authorization = "Bearer " + token;
      }
      return request;
    },
    responseInterceptor: function (response) {
      if (response.status === 401 && new URL(response.url, location.href).pathname === "/openapi.json") {
        notice("The daemon refused the token (401): open the docs again with `memoryd ui --docs`.");
      }
      return response;
    },
  });
})();
