// disque-web's login page: POST /login (JSON) sets the session cookie (HttpOnly,
// SameSite=Strict), then back to the page asked for.
"use strict";

const $ = (sel) => document.querySelector(sel);
let tokenMode = false;

function showToken(on) {
  tokenMode = on;
  $("#user-fields").hidden = on;
  $("#token-fields").hidden = !on;
  $("#username").required = $("#password").required = !on;
  $("#token").required = on;
  $("#use-token").textContent = on ? "Use a user and password instead" : "Use a token instead";
}

function next() {
  // only a path of this site (never another origin)
  const n = new URLSearchParams(location.search).get("next") || "/";
  return n.startsWith("/") && !n.startsWith("//") ? n : "/";
}

async function start() {
  const r = await fetch("/session").catch(() => null);
  if (r && r.ok) {
    const d = await r.json();
    if (d.user) { location.replace(next()); return; }
    const modes = d.login || [];
    if (!modes.includes("nodes")) showToken(true);
    else if (modes.includes("token")) $("#use-token").hidden = false;
  }
}

$("#use-token").addEventListener("click", () => showToken(!tokenMode));

$("#login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = tokenMode ? { token: $("#token").value }
    : { username: $("#username").value, password: $("#password").value };
  const r = await fetch("/login", { method: "POST", headers: { "Content-Type": "application/json" },
                                    body: JSON.stringify(body) });
  if (r.ok) { location.replace(next()); return; }
  let msg = `${r.status} ${r.statusText}`;
  try { msg = (await r.json()).detail || msg; } catch (e) { /* not JSON */ }
  const e = $("#login-error");
  e.textContent = msg;
  e.hidden = false;
});

start();
