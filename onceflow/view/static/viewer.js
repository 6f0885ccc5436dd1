// The execution page of `onceflow show`: select a state (graph, tables or #state=NAME)
// to see its input, output, error and variables; fit, zoom and pan the graph; pick one
// iteration of a Map to see its path alone. The execution's data is the JSON in
// #execution-data; nothing is fetched.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("execution-data").textContent);
  var panel = document.getElementById("panel");
  var canvas = document.getElementById("canvas");
  var graph = document.getElementById("graph");
  var zoomLevel = document.getElementById("zoom-level");
  var body = document.body;
  var natural = { width: graph.viewBox.baseVal.width, height: graph.viewBox.baseVal.height };
  var MIN_SCALE = 0.1;
  var MAX_SCALE = 4;
  var FIT_MARGIN = 24; // graph units around what "fit" shows
  var scale = 1;

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function pretty(value) {
    return value === undefined ? "null" : JSON.stringify(value, null, 2);
  }
  function known(name) {
    return Object.prototype.hasOwnProperty.call(data.states, name);
  }
  function nodeOf(name) {
    var nodes = graph.querySelectorAll(".node[data-state]");
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i].getAttribute("data-state") === name) { return nodes[i]; }
    }
    return null;
  }

  // ---- the variables in scope when a step was entered ----
  // A step's scope comes from the step before it in its branch (that step's scope and
  // what it assigned) or, for the first state of a branch or iteration, from the Map
  // or Parallel it runs in (whose variables it can read).
  var scopes = {};
  function scopeOf(index) {
    if (Object.prototype.hasOwnProperty.call(scopes, index)) { return scopes[index]; }
    var from = data.steps[index].scopeFrom;
    var variables = {};
    if (from) {
      var base = scopeOf(from[1]);
      Object.keys(base).forEach(function (name) { variables[name] = base[name]; });
      if (from[0] === "after") {
        var assigned = data.steps[from[1]].assigned;
        Object.keys(assigned).forEach(function (name) { variables[name] = assigned[name]; });
      }
    }
    scopes[index] = variables;
    return variables;
  }

  // ---- zoom, fit and pan ----
  function setScale(value, focus) {
    // focus: a point in graph units and where it is in the canvas, kept in place.
    var next = Math.min(MAX_SCALE, Math.max(MIN_SCALE, value));
    var point = focus || {
      x: (canvas.scrollLeft + canvas.clientWidth / 2) / scale,
      y: (canvas.scrollTop + canvas.clientHeight / 2) / scale,
      left: canvas.clientWidth / 2,
      top: canvas.clientHeight / 2
    };
    scale = next;
    graph.setAttribute("width", String(natural.width * scale));
    graph.setAttribute("height", String(natural.height * scale));
    canvas.scrollLeft = point.x * scale - point.left;
    canvas.scrollTop = point.y * scale - point.top;
    zoomLevel.textContent = Math.round(scale * 100) + "%";
    body.setAttribute("data-scale", scale.toFixed(4));
  }
  function bounds(nodes) {
    var box = null;
    nodes.forEach(function (node) {
      var rect = node.querySelector("rect");
      var x = Number(rect.getAttribute("x"));
      var y = Number(rect.getAttribute("y"));
      var right = x + Number(rect.getAttribute("width"));
      var bottom = y + Number(rect.getAttribute("height"));
      box = box === null ? { x: x, y: y, right: right, bottom: bottom } : {
        x: Math.min(box.x, x),
        y: Math.min(box.y, y),
        right: Math.max(box.right, right),
        bottom: Math.max(box.bottom, bottom)
      };
    });
    return box;
  }
  function fit(nodes, largest) {
    var box = bounds(nodes);
    if (box === null) { box = { x: 0, y: 0, right: natural.width, bottom: natural.height }; }
    var width = box.right - box.x + 2 * FIT_MARGIN;
    var height = box.bottom - box.y + 2 * FIT_MARGIN;
    var wanted = Math.min(canvas.clientWidth / width, canvas.clientHeight / height, largest);
    setScale(wanted, {
      x: (box.x + box.right) / 2,
      y: (box.y + box.bottom) / 2,
      left: canvas.clientWidth / 2,
      top: canvas.clientHeight / 2
    });
  }
  function fitPath() {
    var path = Array.prototype.slice.call(graph.querySelectorAll('.node[data-entered="true"]'));
    fit(path.length ? path : [], 1.5);
    body.setAttribute("data-fit", "path");
  }
  function fitAll() {
    fit([], 1.5);
    body.setAttribute("data-fit", "all");
  }
  function reveal(node) {
    // Scroll the canvas (at the same scale) so that a node out of view is in its middle.
    var view = canvas.getBoundingClientRect();
    var rect = node.getBoundingClientRect();
    var inside = rect.left >= view.left && rect.right <= view.left + canvas.clientWidth &&
      rect.top >= view.top && rect.bottom <= view.top + canvas.clientHeight;
    if (inside) { return; }
    canvas.scrollLeft += rect.left + rect.width / 2 - (view.left + canvas.clientWidth / 2);
    canvas.scrollTop += rect.top + rect.height / 2 - (view.top + canvas.clientHeight / 2);
  }
  var actions = {
    "fit": fitPath,
    "fit-all": fitAll,
    "zoom-in": function () { setScale(scale * 1.25); },
    "zoom-out": function () { setScale(scale / 1.25); },
    "actual": function () { setScale(1); }
  };
  document.querySelectorAll("[data-action]").forEach(function (button) {
    button.addEventListener("click", function () {
      actions[button.getAttribute("data-action")]();
    });
  });
  canvas.addEventListener("wheel", function (event) {
    if (!event.ctrlKey && !event.metaKey) { return; } // a plain wheel scrolls
    event.preventDefault();
    var view = canvas.getBoundingClientRect();
    var left = event.clientX - view.left;
    var top = event.clientY - view.top;
    setScale(scale * (event.deltaY < 0 ? 1.15 : 1 / 1.15), {
      x: (canvas.scrollLeft + left) / scale,
      y: (canvas.scrollTop + top) / scale,
      left: left,
      top: top
    });
  }, { passive: false });
  var drag = null;
  canvas.addEventListener("pointerdown", function (event) {
    if (event.button !== 0 || event.target.closest(".node")) { return; }
    drag = { x: event.clientX, y: event.clientY, left: canvas.scrollLeft, top: canvas.scrollTop };
    canvas.setPointerCapture(event.pointerId);
    canvas.classList.add("panning");
  });
  canvas.addEventListener("pointermove", function (event) {
    if (drag === null) { return; }
    canvas.scrollLeft = drag.left - (event.clientX - drag.x);
    canvas.scrollTop = drag.top - (event.clientY - drag.y);
  });
  function stopDrag() {
    drag = null;
    canvas.classList.remove("panning");
  }
  canvas.addEventListener("pointerup", stopDrag);
  canvas.addEventListener("pointercancel", stopDrag);
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var keys = { "+": "zoom-in", "=": "zoom-in", "-": "zoom-out", "f": "fit", "a": "fit-all" };
    if (Object.prototype.hasOwnProperty.call(keys, event.key)) {
      actions[keys[event.key]]();
    }
  });

  // ---- the selected state's detail ----
  function section(parent, title, className, value) {
    parent.appendChild(element("h4", "", title));
    parent.appendChild(element("pre", "json " + className, pretty(value)));
  }
  function variables(parent, title, className, value) {
    parent.appendChild(element("h4", "", title));
    if (Object.keys(value).length) {
      parent.appendChild(element("pre", "json " + className, pretty(value)));
    } else {
      parent.appendChild(element("p", "none " + className, "none"));
    }
  }
  function showEntry(state, entry, index) {
    var part = element("section", "entry");
    if (state.entries.length > 1) {
      part.appendChild(element("h3", "", "Entered " + (index + 1) + " of " + state.entries.length));
    }
    var timing = entry.durationMs === null ? "" : " (" + entry.durationMs + " ms)";
    part.appendChild(element("p", "outcome", entry.outcome + timing));
    if (entry.errors.length) {
      var caught = entry.outcome.indexOf("caught") === 0;
      part.appendChild(element("p", caught ? "caught-error" : "error",
        (caught ? "Caught error: " : "Error: ") + entry.errors.join(", ")));
    }
    if (entry.cause) {
      part.appendChild(element("h4", "", "Cause"));
      part.appendChild(element("pre", "cause", entry.cause));
    }
    if (entry.entered) {
      part.appendChild(element("p", "timing", "Entered " + entry.entered +
        (entry.exited ? ", left " + entry.exited : "")));
    }
    section(part, "Input", "input", entry.input);
    variables(part, "Variables in scope when entered", "variables-scope", scopeOf(entry.step));
    section(part, "Output", "output", entry.output);
    variables(part, "Variables assigned", "variables-assigned", data.steps[entry.step].assigned);
    panel.appendChild(part);
  }
  function select(name, from) {
    if (!known(name)) { return; }
    var state = data.states[name];
    document.querySelectorAll(".node.selected").forEach(function (node) {
      node.classList.remove("selected");
    });
    document.querySelectorAll("tr.selected-row").forEach(function (row) {
      row.classList.remove("selected-row");
    });
    document.querySelectorAll("tr[data-state]").forEach(function (row) {
      if (row.getAttribute("data-state") === name) { row.classList.add("selected-row"); }
    });
    var node = nodeOf(name);
    if (node) {
      node.classList.add("selected");
      if (from !== "graph") { reveal(node); }
    }
    panel.replaceChildren();
    panel.setAttribute("data-state", name);
    panel.appendChild(element("h2", "", name));
    panel.appendChild(element("p", "type", state.subtitle));
    if (!entriesShown(state).length) {
      panel.appendChild(element("p", "not-entered",
        picked.map === null ? "not entered" : "not entered in this iteration"));
    }
    entriesShown(state).forEach(function (entry, index, shown) {
      showEntry({ entries: shown }, entry, index);
    });
    section(panel, "Definition", "definition", state.definition);
    body.setAttribute("data-selected", name);
  }
  document.querySelectorAll("[data-state]").forEach(function (node) {
    if (node === panel) { return; }
    var from = node.closest("svg") ? "graph" : "table";
    node.addEventListener("click", function () { select(node.getAttribute("data-state"), from); });
    node.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        select(node.getAttribute("data-state"), from);
      }
    });
  });


  // ---- one iteration of a Map at a time ----
  // The graph first shows every iteration's path at once; a picked iteration shows its
  // own inside the Map (the states outside as they ran), its rows alone in the tables,
  // and its entries alone in the panel.
  var picked = { map: null, index: null };
  var iterations = data.iterations || {};
  var drawn = {}; // each node's and edge's classes with every iteration shown
  graph.querySelectorAll(".node[data-state], .edge[data-edge]").forEach(function (item) {
    drawn[item.getAttribute("data-state") || "edge " + item.getAttribute("data-edge")] =
      { classes: item.getAttribute("class"), entered: item.getAttribute("data-entered") };
  });
  function entriesShown(state) {
    if (picked.map === null) { return state.entries; }
    var label = picked.map + "#" + picked.index;
    var inside = iterations[picked.map].inside;
    return state.entries.filter(function (entry) {
      return entry.iteration === label || inside.indexOf(data.steps[entry.step].name) < 0;
    });
  }
  function restore(item, key) {
    item.setAttribute("class", drawn[key].classes);
    if (drawn[key].entered !== null) { item.setAttribute("data-entered", drawn[key].entered); }
  }
  function pickIteration(map, index) {
    var run = index === "" ? null : iterations[map].runs[index];
    var inside = iterations[map].inside;
    picked = run ? { map: map, index: index } : { map: null, index: null };
    graph.querySelectorAll(".node[data-state]").forEach(function (node) {
      var name = node.getAttribute("data-state");
      restore(node, name);
      if (!run || inside.indexOf(name) < 0) { return; }
      var entered = run.entered.indexOf(name) >= 0;
      node.setAttribute("data-entered", entered ? "true" : "false");
      ["entered", "failed", "caught"].forEach(function (kind) { node.classList.remove(kind); });
      if (entered) { node.classList.add("entered"); }
      if (run.failed.indexOf(name) >= 0) { node.classList.add("failed"); }
      else if (run.caught.indexOf(name) >= 0) { node.classList.add("caught"); }
    });
    graph.querySelectorAll(".edge[data-edge]").forEach(function (edge) {
      var number = edge.getAttribute("data-edge");
      restore(edge, "edge " + number);
      var source = edge.getAttribute("data-source");
      if (!run || inside.indexOf(source) < 0) { return; }
      var taken = run.taken.indexOf(Number(number)) >= 0;
      edge.classList.toggle("taken", taken);
      edge.querySelector("path").setAttribute("marker-end",
        taken ? "url(#arrow-taken)" : "url(#arrow)");
    });
    document.querySelectorAll("tr[data-map]").forEach(function (row) {
      var other = run !== null && row.getAttribute("data-map") === map &&
        row.getAttribute("data-iteration") !== index;
      row.classList.toggle("other-iteration", other);
    });
    body.setAttribute("data-iteration", run ? map + "#" + index : "");
    var current = body.getAttribute("data-selected");
    var next = run && run.endState ? run.endState : current;
    if (next) { select(next, "picker"); }
  }
  document.querySelectorAll("select.iteration-picker").forEach(function (picker) {
    picker.addEventListener("change", function () {
      // One picker at a time: picking in one shows every iteration of the others.
      document.querySelectorAll("select.iteration-picker").forEach(function (other) {
        if (other !== picker) { other.value = ""; }
      });
      pickIteration(picker.getAttribute("data-map"), picker.value);
    });
  });

  // ---- first view: the path fitted, the failed (or last) state selected ----
  fitPath();
  var wanted = /^#state=(.+)$/.exec(window.location.hash);
  var failed = graph.querySelector(".node.failed");
  var first = null;
  if (wanted) {
    try { first = decodeURIComponent(wanted[1]); } catch (e) { first = null; }
  }
  if (!first || !known(first)) {
    first = failed ? failed.getAttribute("data-state") : data.path[data.path.length - 1];
  }
  if (first) { select(first, "start"); }
  body.setAttribute("data-highlighted-count",
    String(graph.querySelectorAll('.node[data-entered="true"]').length));
  body.setAttribute("data-taken-count", String(graph.querySelectorAll(".edge.taken").length));
  body.setAttribute("data-node-count", String(graph.querySelectorAll(".node[data-state]").length));
  body.setAttribute("data-ready", "true");
})();
