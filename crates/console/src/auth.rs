//! Who may do what: the login and logout endpoints, and the checks every
//! page and action passes through.
//!
//! - A page needs a live session ([`page`]); without one the browser is
//!   sent to `/login`.
//! - An action (every state change is a POST) needs a live session, a
//!   same-origin request, the session's CSRF token and the right role
//!   ([`action`]); anything else is 403.
//! - Logins are throttled per account and per address, and password checks
//!   are bounded across the console (`throttle.rs`); a login is checked
//!   against the configured argon2 hash, or a decoy for an unknown name, so
//!   both cost the same. After it, the browser goes to the page it came
//!   for only if that is a plain path of this console (`input.rs`).

use std::time::Duration;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use maud::html;
use oncehook_common::config::ConsoleRole;
use oncehook_ops::password;
use oncehook_ops::store::audit::NewAuditEntry;
use tokio::sync::OwnedSemaphorePermit;

use oncehook_common::store::scope::Scope;

use crate::form::Pairs;
use crate::html::{self, Page};
use crate::input;
use crate::session::{COOKIE, Session};
use crate::state::State;
use crate::throttle;

/// The person behind a request.
pub struct Who {
    pub session: Session,
    pub role: ConsoleRole,
    /// Whose rows the user's pages read and write: the account's tenants,
    /// or every tenant's for a platform operator (docs/tenants.md).
    pub scope: Scope,
    /// The session's CSRF token, for the forms of the page.
    pub csrf: String,
}

impl Who {
    pub fn may_act(&self) -> bool {
        self.role == ConsoleRole::Operator
    }

    /// Whether the user sees every tenant (the pages that are not kept to
    /// a tenant — the stats, the refunds' kill switch — are theirs only).
    pub fn is_platform(&self) -> bool {
        self.scope == Scope::Platform
    }
}

/// The session cookie's value, if the request carries one.
fn cookie(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The request's live session and its user's current role.
pub fn who(req: &HttpRequest, state: &State) -> Option<Who> {
    let session = state.sessions.check(&cookie(req)?)?;
    let user = state.user(&session.user)?;
    let role = user.role;
    let scope = match &user.tenants {
        None => Scope::Platform,
        Some(ids) => Scope::Tenants(ids.clone()),
    };
    let csrf = state.sessions.csrf_token(&session);
    Some(Who {
        session,
        role,
        scope,
        csrf,
    })
}

/// A page: the session, or a redirect to the login page.
/// (The refusal is boxed: an `HttpResponse` is large.)
pub fn page(req: &HttpRequest, state: &State) -> Result<Who, Box<HttpResponse>> {
    who(req, state).ok_or_else(|| Box::new(to_login(req)))
}

fn to_login(req: &HttpRequest) -> HttpResponse {
    let next = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let target = format!(
        "/login?next={}",
        url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
    );
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, target))
        .finish()
}

/// An action: a live session, a same-origin POST, the session's CSRF token
/// (form field `csrf`) and at least the role `need`.
pub fn action(
    req: &HttpRequest,
    state: &State,
    form: &Pairs,
    need: ConsoleRole,
) -> Result<Who, Box<HttpResponse>> {
    let who = page(req, state)?;
    if !same_origin(req) {
        return Err(Box::new(forbidden(
            Some(&who),
            "This request came from another site.",
        )));
    }
    let token = form.get("csrf").unwrap_or_default();
    if !state.sessions.csrf_ok(&who.session, &token) {
        return Err(Box::new(forbidden(
            Some(&who),
            "The form's security token is missing or wrong (an old tab?). Reload the page and try again.",
        )));
    }
    if who.role < need {
        return Err(Box::new(forbidden(
            Some(&who),
            "Your role (viewer) reads every page; replaying and purging dead letters, replaying notifications, enabling endpoints, and approving, cancelling, pausing and resuming refunds need the operator role.",
        )));
    }
    Ok(who)
}

/// A browser's POST names its origin; it must be this console.
fn same_origin(req: &HttpRequest) -> bool {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return true;
    };
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let origin = origin.to_str().unwrap_or_default();
    let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
    !host.is_empty() && origin_host == host
}

pub fn forbidden(who: Option<&Who>, why: &str) -> HttpResponse {
    html::respond(
        actix_web::http::StatusCode::FORBIDDEN,
        Page::new("Forbidden", who).body(html! {
            h1 { "Forbidden" }
            p.error { (why) }
        }),
    )
}

/// `GET /login`
pub async fn login_page(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    if who(&req, &state).is_some() {
        return redirect("/");
    }
    let q = Pairs::parse(req.query_string().as_bytes());
    login_form(
        actix_web::http::StatusCode::OK,
        input::next_page(q.get("next").as_deref()),
        None,
    )
}

fn login_form(
    status: actix_web::http::StatusCode,
    next: &str,
    message: Option<&str>,
) -> HttpResponse {
    html::respond(
        status,
        Page::new("Log in", None).body(html! {
            h1 { "oncehook console" }
            @if let Some(m) = message { p.error role="alert" { (m) } }
            form.login method="post" action="/login" {
                input type="hidden" name="next" value=(next);
                label { "Name" input name="user" autocomplete="username" required autofocus; }
                label { "Password" input name="password" type="password" autocomplete="current-password" required; }
                button type="submit" { "Log in" }
            }
        }),
    )
}

/// The longest name the throttle keeps as it was typed (a longer one is
/// no account; its key is cut to this many characters).
const MAX_NAME_KEY: usize = 128;

/// `POST /login`: the throttle first (the attempt is counted before its
/// password is checked), then one of the console's bounded password
/// checks, then the session and the way to the page asked for.
pub async fn login(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    if !same_origin(&req) {
        return forbidden(None, "This request came from another site.");
    }
    let form = Pairs::parse(&body);
    let login = LoginForm::read(&req, &form);
    let keys = login.throttle_keys();
    let attempt = match state.throttle.attempt(&keys) {
        Ok(a) => a,
        Err(wait) => return too_many_failures(&state, &login, wait).await,
    };
    // One of the console's few password checks, or a refusal now: a burst
    // of logins cannot pile argon2 hashes up (the attempt stays counted).
    // The permit goes into the check, so it is held until the hash is done
    // even if the browser goes away first.
    let Ok(permit) = state.password_checks.clone().try_acquire_owned() else {
        return busy(&state, &login).await;
    };
    let password = form.raw("password").unwrap_or_default();
    if !password_matches(&state, &login.name, password, permit).await {
        tracing::warn!(user = %login.name, addr = %login.addr, "console login failed");
        login.audit(&state, false, "wrong name or password").await;
        return login_form(
            actix_web::http::StatusCode::UNAUTHORIZED,
            &login.next,
            Some("Wrong name or password."),
        );
    }
    state.throttle.forgive(attempt);
    state.throttle.clear(&keys[0]);
    open_session(&state, &login).await
}

/// A login form as sent: who, from where, and the page asked for (the
/// password is read only for its check).
struct LoginForm {
    name: String,
    next: String,
    addr: String,
}

impl LoginForm {
    fn read(req: &HttpRequest, form: &Pairs) -> LoginForm {
        LoginForm {
            name: form.get("user").unwrap_or_default(),
            next: input::next_page(form.get("next").as_deref()).to_owned(),
            addr: peer_addr(req),
        }
    }

    /// What the throttle counts failures against: the account (its name
    /// cut to [`MAX_NAME_KEY`]) and the address.
    fn throttle_keys(&self) -> [String; 2] {
        let name_key: String = self.name.chars().take(MAX_NAME_KEY).collect();
        [format!("user:{name_key}"), format!("addr:{}", self.addr)]
    }

    async fn audit(&self, state: &State, ok: bool, result: &str) {
        audit_login(state, &self.name, "login", ok, result, &self.addr).await;
    }
}

/// The answer while the throttle holds this account or address back.
async fn too_many_failures(state: &State, login: &LoginForm, wait: Duration) -> HttpResponse {
    tracing::warn!(user = %login.name, addr = %login.addr, "console login refused: too many failures");
    login
        .audit(state, false, "refused: too many failed logins")
        .await;
    refused(
        actix_web::http::StatusCode::TOO_MANY_REQUESTS,
        &login.next,
        wait,
        &format!(
            "Too many failed logins. Try again in {} minute(s).",
            wait.as_secs().max(1).div_ceil(60)
        ),
    )
}

/// The answer while every password check is taken.
async fn busy(state: &State, login: &LoginForm) -> HttpResponse {
    tracing::warn!(user = %login.name, addr = %login.addr, "console login refused: every password check is taken");
    login
        .audit(
            state,
            false,
            "refused: the console was busy checking other logins",
        )
        .await;
    refused(
        actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
        &login.next,
        throttle::BUSY_RETRY,
        "The console is busy checking other logins. Try again in a few seconds.",
    )
}

/// Whether `password` is `name`'s, checked off the async threads while
/// `permit` is held. An unknown name is checked against the decoy hash, so
/// it costs the same as a wrong password.
async fn password_matches(
    state: &State,
    name: &str,
    password: String,
    permit: OwnedSemaphorePermit,
) -> bool {
    let hash = state
        .user(name)
        .map(|u| u.password_hash.expose().to_owned());
    let known = hash.is_some();
    let hash = hash.unwrap_or_else(|| state.decoy_hash.clone());
    let ok = web::block(move || {
        let ok = password::verify(&password, &hash);
        drop(permit);
        ok
    })
    .await
    .unwrap_or(false);
    ok && known
}

/// A session for the user who just logged in, and the way to the page they
/// asked for.
async fn open_session(state: &State, login: &LoginForm) -> HttpResponse {
    let (_, value) = state.sessions.open(&login.name);
    tracing::info!(user = %login.name, addr = %login.addr, "console login");
    login.audit(state, true, "session opened").await;
    // `next` passed `input::next_page`, so it is a valid header value.
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, login.next.clone()))
        .insert_header((
            header::SET_COOKIE,
            session_cookie(state, &value, state.sessions.ttl()),
        ))
        .finish()
}

/// The address the request came from, as the audit trail writes it.
fn peer_addr(req: &HttpRequest) -> String {
    req.peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default()
}

/// The login form again with `message`, refused with `status` and a
/// `Retry-After` of `wait`.
fn refused(
    status: actix_web::http::StatusCode,
    next: &str,
    wait: Duration,
    message: &str,
) -> HttpResponse {
    let mut resp = login_form(status, next, Some(message));
    if let Ok(v) = header::HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// `POST /logout`: ends the session (its cookie is refused from now on).
pub async fn logout(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match action(&req, &state, &form, ConsoleRole::Viewer) {
        Ok(w) => w,
        Err(resp) => return *resp,
    };
    state.sessions.close(&who.session.id);
    tracing::info!(user = %who.session.user, "console logout");
    let addr = peer_addr(&req);
    audit_login(
        &state,
        &who.session.user,
        "logout",
        true,
        "session closed",
        &addr,
    )
    .await;
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/login"))
        .insert_header((
            header::SET_COOKIE,
            session_cookie(&state, "", Duration::ZERO),
        ))
        .finish()
}

/// Writes a login or logout to the audit trail. A name that is no account
/// is not written (it may be a password typed into the wrong field).
async fn audit_login(state: &State, name: &str, action: &str, ok: bool, result: &str, addr: &str) {
    let role = state.role_of(name);
    let actor = if role.is_some() {
        name
    } else {
        "(no such account)"
    };
    state
        .audit(&NewAuditEntry {
            actor,
            role: role.map_or("-", |r| r.as_str()),
            action,
            letters: &[],
            scope: None,
            ok,
            result,
            address: Some(addr),
        })
        .await;
}

fn session_cookie(state: &State, value: &str, max_age: Duration) -> String {
    let secure = if state.settings.console.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        max_age.as_secs()
    )
}

pub fn redirect(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to.to_owned()))
        .finish()
}
