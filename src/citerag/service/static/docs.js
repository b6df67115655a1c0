// Starts Swagger UI on /openapi.json. A file, not an inline script: the page runs under script-src 'self'.
"use strict";
window.addEventListener("DOMContentLoaded", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    validatorUrl: null, // the public validator is elsewhere: nothing leaves the page
    presets: [SwaggerUIBundle.presets.apis],
  });
});
