// Runs first: records every script error, failed load and policy violation on
// <html data-errors> so that a test (and a reader) can see the page broke.
(function () {
  "use strict";
  var errors = [];
  var root = document.documentElement;
  function note(message) {
    errors.push(String(message));
    root.setAttribute("data-errors", JSON.stringify(errors));
  }
  root.setAttribute("data-errors", "[]");
  window.addEventListener("error", function (event) {
    note(event.message || "failed to load " + String(event.target && event.target.nodeName));
  }, true);
  window.addEventListener("unhandledrejection", function (event) {
    note("unhandled rejection: " + String(event.reason));
  });
  document.addEventListener("securitypolicyviolation", function (event) {
    note("content security policy: " + event.violatedDirective + " " + event.blockedURI);
  });
  var original = console.error;
  console.error = function () {
    note(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
