// Rota dashboard: the little the server-rendered pages need in the browser.
// Times in the browser's zone, actions sent to the REST API (JSON, CSRF header), the live log
// tail, charts, and a check of job data against its job type's schema. No build step.
(function () {
  "use strict";

  const CSRF = { "X-Rota-CSRF": "1" };
  // Where the dashboard is mounted ("" at the root of the site, "/rota" under a prefix): the
  // pages carry it in every URL they hold; the script puts it before the paths it makes.
  const rootMeta = document.querySelector('meta[name="rota-root"]');
  const ROOT = rootMeta ? rootMeta.content : "";

  // --- times ---------------------------------------------------------------------------------
  // ISO order in the browser's zone ("2026-11-29 07:45:00 CET"): short, and sorts as it reads.
  const parts = new Intl.DateTimeFormat("en-CA", {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hourCycle: "h23", timeZoneName: "short",
  });

  function isoLocal(when, zone) {
    const p = {};
    parts.formatToParts(when).forEach(function (part) { p[part.type] = part.value; });
    const text = p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + ":" + p.second;
    return zone ? text + " " + p.timeZoneName : text;
  }

  const timeOfDay = new Intl.DateTimeFormat(undefined, {
    hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3,
  });

  function localTimes(root) {
    root.querySelectorAll("time[datetime]:not([data-local])").forEach(function (el) {
      const when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) return;
      const kind = el.dataset.fmt;
      if (kind === "time") el.textContent = timeOfDay.format(when);
      else if (kind === "iso") el.textContent = isoLocal(when, false);
      else if (kind !== "ago") el.textContent = isoLocal(when, true);
      // on hover: the time in UTC and, when it differs, in this browser's zone
      const local = isoLocal(when, true);
      if (el.title && !local.endsWith(" UTC")) el.title = el.title + " · " + local;
      el.dataset.local = "1";
    });
    agoTimes(root);
  }

  // How long ago (or how soon): the server's words (dashboard/display.py), kept current.
  const UNITS = [[86400 * 365, "year"], [86400 * 30, "month"], [86400, "day"], [3600, "h"], [60, "min"], [1, "s"]];

  function ago(when, now) {
    const seconds = (now - when) / 1000;
    const size = Math.abs(seconds);
    if (size < 5) return "just now";
    for (const [unit, name] of UNITS) {
      if (size >= unit) {
        const count = Math.floor(size / unit);
        const label = count + " " + name + ((name === "year" || name === "month" || name === "day") && count > 1 ? "s" : "");
        return seconds > 0 ? label + " ago" : "in " + label;
      }
    }
    return "just now";
  }

  function agoTimes(root) {
    const now = Date.now();
    (root.querySelectorAll ? root : document).querySelectorAll(".ago[data-ago]").forEach(function (el) {
      const when = new Date(el.dataset.ago);
      if (!isNaN(when)) el.textContent = ago(when, now);
    });
  }

  // --- messages ------------------------------------------------------------------------------
  // A message; ``link`` ({href, label}): what the action created, one click away.
  function flash(text, kind, link) {
    const box = document.getElementById("flash");
    if (!box) return;
    box.textContent = text;
    if (link && link.href) {
      const a = document.createElement("a");
      a.href = link.href;
      a.textContent = link.label || "Open it";
      a.dataset.testid = "flash-link";
      box.appendChild(a);
    }
    box.className = kind || "";
    clearTimeout(flash.timer);
    flash.timer = setTimeout(function () { box.textContent = ""; box.className = ""; }, 8000);
  }

  async function problemText(response) {
    try {
      const body = await response.json();
      return (body.detail || body.title || "") + (body.field ? " (" + body.field + ")" : "");
    } catch (e) {
      return "";
    }
  }

  // --- the session ---------------------------------------------------------------------------
  // A refresh token works once: presented twice, the server ends the login as stolen. So this
  // browser refreshes one request at a time: the requests of a page share one refresh, and the
  // tabs take turns under a Web Lock (each then sends the cookie the one before it brought).
  let refreshing = null;

  function refreshOnce() {
    return fetch(ROOT + "/ui/session/refresh", { method: "POST", headers: CSRF, credentials: "same-origin" })
      // 409: another request of this browser is renewing the cookies right now; theirs count.
      .then(function (r) { return r.status === 204 || r.status === 409; }, function () { return false; });
  }

  function refreshSession() {
    if (!refreshing) {
      const locks = navigator.locks;
      const run = locks ? locks.request("rota-session-refresh", refreshOnce) : refreshOnce();
      refreshing = run.finally(function () { refreshing = null; });
    }
    return refreshing;
  }

  function toLogin(next) {
    const target = next || location.pathname + location.search;
    const login = ROOT + "/login";
    window.location = target === ROOT + "/" ? login : login + "?next=" + encodeURIComponent(target);
  }

  window.rota = { refreshSession: refreshSession };

  // --- calling the API -----------------------------------------------------------------------
  async function call(method, url, body, retried, extra) {
    const headers = Object.assign({ "Accept": "application/json" }, CSRF, extra || {});
    const init = { method: method, headers: headers, credentials: "same-origin" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(url, init);
    if (response.status === 401 && !retried) {
      if (await refreshSession()) return call(method, url, body, true, extra);
      toLogin();
    }
    return response;
  }

  // A part of the page fetched by htmx after the access token expired: renew, fetch again.
  document.addEventListener("htmx:responseError", function (event) {
    if (event.detail.xhr.status !== 401) return;
    refreshSession().then(function (ok) {
      if (ok) htmx.trigger(event.detail.elt, "rota:refresh"); else toLogin();
    });
  });

  // Sign-in and sign-out: posted with the CSRF header; the answer names where to go, or is
  // the page again (a refused sign-in), whose main part replaces this one's.
  async function post(form) {
    const response = await fetch(form.action, {
      method: "POST",
      headers: CSRF,
      body: new URLSearchParams(new FormData(form)),
      credentials: "same-origin",
    });
    const next = response.headers.get("X-Rota-Redirect");
    if (next) { window.location = next; return; }
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    const main = page.querySelector("main");
    if (main) document.querySelector("main").replaceWith(document.adoptNode(main));
    else flash("Refused (" + response.status + ").", "error");
  }

  function resume(main) {
    refreshSession().then(function (ok) {
      window.location.replace(ok ? main.dataset.next : main.dataset.login);
    });
  }

  function refresh(target) {
    if (target === "page") { window.location.reload(); return; }
    // Through the element's own trigger, so its hx-sync queue orders this request with the
    // ones events trigger (the last change is always fetched).
    const el = document.querySelector(target);
    if (el && window.htmx) {
      el.dataset.forceRefresh = "1";  // the user's own action: refresh even while they work in it
      htmx.trigger(el, "rota:refresh");
    }
  }

  async function after(el, response) {
    if (!response.ok) {
      const text = await problemText(response);
      const message = response.status === 403 ? "Your role may not do this." : text || "Refused (" + response.status + ").";
      flash(message, "error");
      return false;
    }
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    const id = body && body.id ? body.id : "";
    const link = el.dataset.created && id
      ? { href: el.dataset.created.replace("{id}", id), label: el.dataset.createdLabel } : null;
    let message = el.dataset.done || "Done.";
    // a new API key, a generated webhook secret: shown this once, in the page (never stored
    // by the dashboard); the page is then not reloaded, so that it can be copied
    const field = el.dataset.showField || "key";
    let shown = false;
    if (el.dataset.showKey && body && body[field]) {
      const box = document.querySelector(el.dataset.showKey);
      if (box) {
        (box.querySelector("code.secret") || box.querySelector("code")).textContent = body[field];
        box.hidden = false;
        box.scrollIntoView({ block: "nearest" });
        shown = true;
        if (box.dataset.done) message = box.dataset.done;
      }
    }
    if (el.dataset.next) {
      // the message outlives the move to the next page
      try { sessionStorage.setItem("rota-flash", JSON.stringify({ text: message, link: link })); } catch (e) { /* private mode */ }
      window.location = el.dataset.next.replace("{id}", id);
      return true;
    }
    flash(message, "ok", link);
    if (el.hasAttribute("data-refresh-page")) {
      if (!shown) {
        // the message outlives the reload
        try { sessionStorage.setItem("rota-flash", JSON.stringify({ text: message, link: link })); } catch (e) { /* private mode */ }
        refresh("page");
      }
    } else if (el.dataset.refresh) {
      refresh(el.dataset.refresh);
    }
    return true;
  }

  function split(spec) {
    const i = spec.indexOf(" ");
    return [spec.slice(0, i), spec.slice(i + 1)];
  }

  document.addEventListener("click", async function (event) {
    const el = event.target.closest("button[data-api]");
    if (!el) return;
    event.preventDefault();
    if (el.dataset.confirm && !window.confirm(el.dataset.confirm)) return;
    const [method, url] = split(el.dataset.api);
    const body = el.dataset.body ? JSON.parse(el.dataset.body) : (method === "DELETE" ? undefined : {});
    el.disabled = true;
    try { await after(el, await call(method, url, body)); } finally { el.disabled = false; }
  });

  // --- forms to JSON -------------------------------------------------------------------------
  function value(input) {
    const kind = input.dataset.kind;
    if (kind === "bool") return input.checked;
    const raw = input.value.trim();
    if (raw === "") return undefined;
    if (kind === "int") return parseInt(raw, 10);
    if (kind === "float") return parseFloat(raw);
    if (kind === "json") return JSON.parse(raw);
    if (kind === "datetime") return raw.length === 16 ? raw + ":00Z" : raw + "Z";
    if (kind === "list") {
      const items = raw.split(",").map(function (s) { return s.trim(); }).filter(Boolean);
      return items.length ? items : undefined;
    }
    return raw;
  }

  function formBody(form) {
    const body = {};
    const nullEmpty = form.hasAttribute("data-null-empty");
    const kindInput = form.querySelector("input[name=_kind]:checked");
    const scheduleKind = kindInput ? kindInput.value : null;
    form.querySelectorAll("input[name], select[name], textarea[name]").forEach(function (input) {
      const name = input.name;
      if (name.startsWith("_") || name === "select" || input.type === "radio" || input.hasAttribute("data-skip")) return;
      const group = input.closest("[data-kind-group]");
      if (group && scheduleKind && group.dataset.kindGroup.split(" ").indexOf(scheduleKind) < 0) {
        // a field of the other kind (executeAt is in both: a cron's start, a one-time run)
        if (nullEmpty && !(name in body) && name !== "timeZone") body[name] = null;
        return;
      }
      const v = value(input);
      // an edit sends a field marked so only when it changed (the Active box of an
      // auto-disabled job: sending false would make it a manual disable, losing the reason)
      if (input.dataset.initial !== undefined && String(v) === input.dataset.initial) return;
      if (v === undefined) {
        if (nullEmpty && name !== "jobType" && name !== "timeZone") body[name] = null;
      } else {
        body[name] = v;
      }
    });
    if (body.tags === null) body.tags = [];
    if (body.description === null) body.description = "";
    if (body.displayName === null) body.displayName = "";
    return body;
  }

  function formError(form, text) {
    const box = form.querySelector("#form-error");
    if (box) { box.hidden = !text; box.textContent = text || ""; }
    if (text) flash(text, "error");
  }

  document.addEventListener("submit", async function (event) {
    const form = event.target;
    if (form.hasAttribute("data-post")) {
      event.preventDefault();
      const button = form.querySelector("button[type=submit]");
      if (button) button.disabled = true;
      try { await post(form); } finally { if (button) button.disabled = false; }
    } else if (form.dataset.apiForm) {
      event.preventDefault();
      let body;
      try { body = formBody(form); } catch (e) { formError(form, "Job data is not valid JSON: " + e.message); return; }
      const schemaError = checkJobData(form);
      if (schemaError) { formError(form, schemaError); return; }
      formError(form, "");
      const [method, template] = split(form.dataset.apiForm);
      // a {field} of the URL is taken from the form (and not sent in the body)
      const url = template.replace(/\{(\w+)\}/g, function (_, name) {
        const v = body[name];
        delete body[name];
        return encodeURIComponent(v === undefined || v === null ? "" : String(v));
      });
      // An edit names the version it was made on: a change made meanwhile is not overwritten.
      const extra = form.dataset.ifMatch ? { "If-Match": form.dataset.ifMatch } : {};
      // A creation sends the form's own Idempotency-Key: a double click, or a submit again
      // after a lost answer, gets the job the first made instead of a second one (a refused
      // request frees the key, so a corrected form is sent as a new creation).
      if (form.hasAttribute("data-idempotent")) extra["Idempotency-Key"] = formKey(form);
      const response = await call(method, url, body, false, extra);
      if (response.status === 412) {
        formError(form, "Someone changed this job since you opened the form: reload it to see their change, then edit again.");
        return;
      }
      if (!response.ok) { formError(form, (await problemText(response.clone())) || "Refused (" + response.status + ")."); }
      await after(form, response);
    } else if (form.dataset.bulkApi) {
      event.preventDefault();
      const button = form.querySelector("button[type=submit]");
      if (button) button.disabled = true;
      try { await bulk(form); } finally { if (button) button.disabled = false; }
    }
  });

  // A bulk action (POST …/bulk): on the selected rows, or on everything the page's filter
  // matches (data-filter); counted first (a dry run) and confirmed, then done a thousand at
  // a time while the answer says there is more, with the progress in the flash message.
  async function bulk(form) {
    const holder = form.closest("[hx-get]") || document;
    const scope = form.querySelector("input[name=_scope]:checked");
    const body = formBody(form);
    Object.keys(body).forEach(function (k) { if (body[k] === undefined || body[k] === "") delete body[k]; });
    if (!scope || scope.value === "selected") {
      const ids = Array.from(holder.querySelectorAll("input[name=select]:checked")).map(function (c) { return c.value; });
      if (!ids.length) { flash("Select some first, or choose all that match the filter.", "error"); return; }
      body.ids = ids;
    } else {
      body.filter = JSON.parse(form.dataset.filter || "{}");
    }
    const label = form.querySelector("select[name=action] option:checked").textContent;
    const counted = await call("POST", form.dataset.bulkApi, Object.assign({}, body, { dryRun: true }));
    if (!counted.ok) { flash((await problemText(counted)) || "Refused (" + counted.status + ").", "error"); return; }
    const count = await counted.json();
    if (!count.matched) { flash("Nothing matches.", "error"); return; }
    const many = count.matched + (count.more ? "+" : "");
    if (!window.confirm(label + " " + many + " " + form.dataset.noun + "?")) return;
    let done = 0;
    let refused = 0;
    for (let round = 0; round < 1000; round++) {
      const response = await call("POST", form.dataset.bulkApi, body);
      if (!response.ok) { flash((await problemText(response)) || "Refused (" + response.status + ").", "error"); break; }
      const answer = await response.json();
      done += answer.done;
      refused += answer.errors.length;
      const more = answer.more && answer.done > 0 && !body.ids;
      flash(label + ": " + done + " done" + (refused ? ", " + refused + " refused (" + answer.errors.map(function (e) { return e.message; }).slice(0, 3).join("; ") + ")" : "") + (more ? "…" : "."), refused ? "error" : "ok");
      if (!more) break;
    }
    holder.querySelectorAll("input[name=select]:checked").forEach(function (c) { c.checked = false; });
    refresh(form.dataset.refresh);
  }

  function formKey(form) {
    if (!form.dataset.idempotencyKey) {
      const bytes = crypto.getRandomValues(new Uint8Array(16));  // no secure context needed
      form.dataset.idempotencyKey = Array.from(bytes, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
    }
    return form.dataset.idempotencyKey;
  }

  // --- job data against the job type's schema ----------------------------------------------
  const TYPES = {
    string: function (v) { return typeof v === "string"; },
    integer: function (v) { return Number.isInteger(v); },
    number: function (v) { return typeof v === "number"; },
    boolean: function (v) { return typeof v === "boolean"; },
    object: function (v) { return v !== null && typeof v === "object" && !Array.isArray(v); },
    array: function (v) { return Array.isArray(v); },
    null: function (v) { return v === null; },
  };

  function resolveRef(schema, root) {
    if (schema && schema.$ref && schema.$ref.startsWith("#/")) {
      return schema.$ref.slice(2).split("/").reduce(function (node, key) { return node && node[key]; }, root) || {};
    }
    return schema || {};
  }

  function validate(value, schema, root, path) {
    schema = resolveRef(schema, root);
    if (schema.anyOf) {
      const ok = schema.anyOf.some(function (s) { return validate(value, s, root, path) === null; });
      return ok ? null : path + " does not match any allowed form";
    }
    const types = schema.type ? [].concat(schema.type) : null;
    if (types && !types.some(function (t) { return TYPES[t] && TYPES[t](value); })) {
      return path + " should be " + types.join(" or ");
    }
    if (schema.enum && !schema.enum.some(function (e) { return JSON.stringify(e) === JSON.stringify(value); })) {
      return path + " should be one of " + schema.enum.map(function (e) { return JSON.stringify(e); }).join(", ");
    }
    if (TYPES.object(value)) {
      for (const key of schema.required || []) {
        if (!(key in value)) return path + "." + key + " is required";
      }
      const props = schema.properties || {};
      for (const key of Object.keys(value)) {
        if (key in props) {
          const error = validate(value[key], props[key], root, path + "." + key);
          if (error) return error;
        } else if (schema.additionalProperties === false) {
          return path + "." + key + " is not allowed";
        }
      }
    }
    if (Array.isArray(value) && schema.items) {
      for (let i = 0; i < value.length; i++) {
        const error = validate(value[i], schema.items, root, path + "[" + i + "]");
        if (error) return error;
      }
    }
    return null;
  }

  function fieldsOf(schema) {
    const required = schema.required || [];
    const props = schema.properties || {};
    const names = Object.keys(props).map(function (name) {
      const p = resolveRef(props[name], schema);
      const type = p.type || (p.anyOf ? p.anyOf.map(function (a) { return resolveRef(a, schema).type; }).filter(Boolean).join(" or ") : "any");
      return name + " (" + type + (required.includes(name) ? ", required" : "") + ")";
    });
    return names.length ? names.join(", ") : "none";
  }

  function checkJobData(form) {
    const area = form.querySelector("#jobData");
    const typeInput = form.querySelector("#jobType");
    const out = document.getElementById("jobData-check");
    const schemas = document.getElementById("schemas");
    if (!area || !typeInput || !schemas) return null;
    let data = null;
    const raw = area.value.trim();
    if (raw) {
      try { data = JSON.parse(raw); } catch (e) {
        area.setAttribute("aria-invalid", "true");
        if (out) out.textContent = "Not valid JSON: " + e.message;
        return "Job data is not valid JSON: " + e.message;
      }
    }
    const schema = JSON.parse(schemas.textContent || "{}")[typeInput.value];
    let error = null;
    if (schema && (raw || (schema.required || []).length)) {
      error = validate(raw ? data : {}, schema, schema, "jobData");
    }
    area.setAttribute("aria-invalid", error ? "true" : "false");
    if (out) {
      let text = error ? error : schema ? "Matches the data schema of " + typeInput.value + "." : raw ? "Valid JSON (no schema known for this job type)." : "";
      if (schema && !raw && !error) text = "Fields of " + typeInput.value + ": " + fieldsOf(schema) + ".";
      out.textContent = text;
      out.className = error ? "error" : "muted";
    }
    return error;
  }

  function formKinds(form) {
    const checked = form.querySelector("input[name=_kind]:checked");
    form.querySelectorAll("[data-kind-group]").forEach(function (group) {
      group.hidden = !!checked && group.dataset.kindGroup.split(" ").indexOf(checked.value) < 0;
    });
  }

  // --- the job picker: the id of the job whose name was picked from the list -----------------
  function pickJob(input) {
    const form = input.form;
    const hidden = form && form.querySelector("input[data-job-id]");
    if (!hidden) return;
    const list = input.list;
    let id = "";
    if (list) {
      for (const option of list.options) {
        if (option.value === input.value) { id = option.dataset.id || ""; break; }
      }
    }
    hidden.value = id;
  }
  document.addEventListener("input", function (event) {
    if (event.target.matches && event.target.matches("input[data-job-picker]")) pickJob(event.target);
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    const list = event.detail.target;
    if (list && list.id === "job-options") {
      const input = document.querySelector("input[data-job-picker]");
      if (input && input.value) pickJob(input);
    }
  });

  document.addEventListener("input", function (event) {
    const form = event.target.closest("#job-form");
    if (!form) return;
    if (event.target.id === "jobData" || event.target.id === "jobType") checkJobData(form);
  });
  document.addEventListener("change", function (event) {
    const form = event.target.closest("#job-form");
    if (form) { formKinds(form); checkJobData(form); }
  });

  // --- live log tail, and leaving a selection alone ------------------------------------------
  document.addEventListener("htmx:configRequest", function (event) {
    const el = event.detail.elt;
    if (el.id === "log") event.detail.parameters.after = el.dataset.logAfter || "0";
  });
  // A live part (its trigger has rota:refresh) is not replaced under someone working in it —
  // rows selected, a form or a disclosure open, the focus in a field — when an event, the
  // stream's "ready" or the poll refreshes it: checked when the request starts and again
  // when its answer arrives. Their own action (data-force-refresh) refreshes it anyway.
  function livePart(el) {
    const trigger = el.getAttribute && el.getAttribute("hx-trigger");
    return Boolean(trigger && trigger.indexOf("rota:refresh") >= 0);
  }

  function busy(el) {
    const kept = el.hasAttribute("data-keep-selection") ? "input[name=select]:checked, details[open]" : "details[open]";
    return Boolean(el.querySelector(kept)) || (el.contains(document.activeElement) && document.activeElement.matches("input, textarea, select"));
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    const el = event.detail.elt;
    if (el.dataset && el.dataset.forceRefresh) {
      delete el.dataset.forceRefresh;
      el.dataset.forcedInFlight = "1";
      return;
    }
    if (livePart(el) && event.detail.requestConfig && event.detail.requestConfig.verb === "get" && busy(el)) {
      event.preventDefault();
    }
  });
  // A live part's answer that is what it shows already is not swapped in: its nodes stay, and
  // an event stream that refreshes it every second costs no DOM work.
  const swappedHtml = new WeakMap();
  // Nor is one swapped while a button or link of it is pressed: the click would be lost with
  // the node it started on. It is fetched again once the pointer is released.
  let pressed = null;
  document.addEventListener("pointerdown", function (event) { pressed = event.target; }, true);
  // Released, or taken over by the browser (a touch that turns into a scroll): refresh what
  // waited, after the click.
  function released() {
    pressed = null;
    document.querySelectorAll("[data-refresh-after-press]").forEach(function (el) {
      delete el.dataset.refreshAfterPress;
      setTimeout(function () { htmx.trigger(el, "rota:refresh"); }, 0);
    });
  }
  document.addEventListener("pointerup", released, true);
  document.addEventListener("pointercancel", released, true);
  document.addEventListener("htmx:beforeSwap", function (event) {
    const el = event.detail.elt;
    if (!el || !livePart(el)) return;
    if (pressed && el.contains(pressed)) {
      event.detail.shouldSwap = false;
      el.dataset.refreshAfterPress = "1";
      return;
    }
    const unchanged = swappedHtml.get(el) === event.detail.serverResponse;
    if (el.dataset.forcedInFlight) delete el.dataset.forcedInFlight;
    else if (busy(el)) { event.detail.shouldSwap = false; return; }  // the next event or poll brings it
    if (unchanged) event.detail.shouldSwap = false;
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    const el = event.detail.target;
    if (el && livePart(el) && event.detail.xhr) swappedHtml.set(el, event.detail.xhr.responseText);
    if (el && el.id === "log") {
      const last = el.lastElementChild;
      if (last && last.dataset.seq) el.dataset.logAfter = last.dataset.seq;
      if (el.scrollHeight - el.scrollTop - el.clientHeight < 120) el.scrollTop = el.scrollHeight;
    }
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    const root = event.detail.elt || document;
    localTimes(root);
    if (root.querySelectorAll) inlineCharts(root);  // a refreshed part brings its chart's data
  });
  document.addEventListener("htmx:sseOpen", function () { setLive("on"); });
  document.addEventListener("htmx:sseError", function () { setLive("off"); });

  function setLive(state) {
    const dot = document.getElementById("live-state");
    if (dot) dot.dataset.state = state;
  }

  // --- charts --------------------------------------------------------------------------------
  const AXIS_FONT = "12px system-ui, sans-serif";

  // The y axis as wide as its longest label (uPlot's fixed 50 px cut "12,500" short).
  function axisSize(u, values) {
    if (!values) return 40;
    const ctx = u.ctx;
    ctx.save();
    ctx.font = AXIS_FONT;
    const widest = values.reduce(function (w, v) { return Math.max(w, ctx.measureText(String(v)).width); }, 0);
    ctx.restore();
    return Math.ceil(widest) + 18;
  }

  // Tick labels: times as short as the span allows (in the browser's zone), counts as whole
  // numbers (1.2k past a thousand), durations with their unit.
  const hourMinute = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  const monthDay = new Intl.DateTimeFormat("en-CA", { month: "2-digit", day: "2-digit" });

  function timeLabels(u, splits) {
    const span = splits.length > 1 ? splits[splits.length - 1] - splits[0] : 0;
    return splits.map(function (t) {
      const when = new Date(t * 1000);
      return span > 2 * 86400 ? monthDay.format(when) : hourMinute.format(when);
    });
  }

  function compact(n) {
    const size = Math.abs(n);
    if (size >= 1e6) return +(n / 1e6).toFixed(1) + "M";
    if (size >= 1e3) return +(n / 1e3).toFixed(1) + "k";
    return String(+n.toFixed(2));
  }

  function durationLabel(ms) {
    if (ms >= 7200000) return +(ms / 3600000).toFixed(1) + " h";
    if (ms >= 120000) return +(ms / 60000).toFixed(1) + " min";
    if (ms >= 1000) return +(ms / 1000).toFixed(1) + " s";
    return +ms.toFixed(2) + " ms";
  }

  // Tick steps: whole numbers (counts, milliseconds), then round minutes and hours of them.
  const WHOLE = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 3e4,
    6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 144e5, 288e5, 864e5, 1728e5, 1e9, 1e10];

  function drawChart(el, xs, ys, step) {
    if (!window.uPlot) return;
    const width = Math.max(240, el.clientWidth || 320);
    const few = xs.length < 3;
    const durations = el.dataset.unit === "ms";
    const opts = {
      width: width, height: 180,
      legend: { show: false },
      padding: [10, 18, 0, 4],  // room for the last time label at the right edge
      scales: {
        // One point (or one time): a range around it, not uPlot's 1000 days after it.
        x: { time: true, range: function (u, min, max) {
          const xs = u.data[0];
          if (!xs || !xs.length) return [min, max];
          const lo = xs[0], hi = xs[xs.length - 1];
          if (lo === hi) return [lo - (step || 300), hi + (step || 300)];
          return [lo, hi];
        } },
        y: { range: function (u, min, max) { return [0, Math.max(1, Math.ceil((max || 0) * 1.1))]; } },
      },
      series: [{}, Object.assign({
        label: el.dataset.label || "", stroke: el.dataset.color || "#2b6cb0",
        fill: (el.dataset.color || "#2b6cb0") + "33", width: 2,
      }, few ? { points: { show: true, size: 7 } } : {})],
      axes: [
        { font: AXIS_FONT, space: 64, values: timeLabels, size: 32 },
        { font: AXIS_FONT, size: axisSize, space: 28, incrs: WHOLE, values: function (u, splits) {
          return splits.map(durations ? durationLabel : compact);
        } },
      ],
    };
    if (el._plot) { el._plot.setData([xs, ys]); return; }
    el.innerHTML = "";
    el.classList.add("plotted");
    el._plot = new uPlot(opts, [xs, ys], el);
    el.setAttribute("role", "img");
    el.setAttribute("aria-label", (el.dataset.label || "series") + ": " + ys.length + " points, latest " + (ys.length ? ys[ys.length - 1] : "none"));
  }

  async function loadCharts(url, els) {
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return;
      const data = await response.json();
      els.forEach(function (el) { drawChart(el, data.x, data[el.dataset.series], data.bucket); });
    } catch (e) { /* next tick */ }
  }

  function inlineCharts(root) {
    root.querySelectorAll(".chart[data-inline]").forEach(function (el) {
      const data = JSON.parse(el.dataset.inline);
      if (data.x.length) drawChart(el, data.x, data.y); else el.textContent = "No finished runs yet.";
    });
  }

  function charts() {
    const byUrl = {};
    inlineCharts(document);
    document.querySelectorAll(".chart").forEach(function (el) {
      if (el.dataset.seriesUrl) {
        (byUrl[el.dataset.seriesUrl] = byUrl[el.dataset.seriesUrl] || []).push(el);
      }
    });
    Object.keys(byUrl).forEach(function (url) {
      const els = byUrl[url];
      loadCharts(url, els);  // one request for the charts that share a series
      const every = Math.max(5, parseInt(els[0].dataset.poll || "10", 10));
      setInterval(function () { loadCharts(url, els); }, Math.min(every, 10) * 1000);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const resuming = document.querySelector("[data-session-resume]");
    if (resuming) { resume(resuming); return; }
    localTimes(document);
    setInterval(function () { agoTimes(document); }, 30000);
    let kept = null;
    try { kept = JSON.parse(sessionStorage.getItem("rota-flash") || "null"); sessionStorage.removeItem("rota-flash"); } catch (e) { kept = null; }
    if (kept) flash(kept.text, "ok", kept.link);
    const form = document.getElementById("job-form");
    if (form) { formKinds(form); checkJobData(form); }
    charts();
  });
})();
