// Parley for web apps: a small ES module with no dependencies, served by Parley at
// /sdk/parley.js. The app never holds a token: its registration's client token lives in an
// HttpOnly cookie that Parley sets and no script can read. Every call is sent with the
// cookie (credentials: "include") and the Parley-CSRF header; a call that needs a person
// sends the whole window to the flow's page, which comes back to the app's returnUrl.

/**
 * @typedef {object} ParleyOptions
 * @property {string} url Parley's public URL, e.g. "https://parley.example".
 * @property {number} [wait] Seconds a proxied call may wait for a sign-in finished elsewhere
 *   (another tab), sent as `Prefer: wait=N`; at most 60. Without it a call that needs a
 *   person navigates to the flow at once.
 * @property {(url: string) => void} [navigate] How the window goes to a flow's page; the
 *   default is `window.location.assign(url)` (a top-level navigation).
 */

/**
 * The contract's flow object.
 * @typedef {object} Flow
 * @property {string} id
 * @property {string} kind `saml2`, `oauth2`, `otp`, `basic`, …
 * @property {string} status `pending`, `completed`, `failed` or `expired`
 * @property {string|null} url The page a person opens (`null` once it is not theirs to open).
 * @property {string} expiresAt RFC 3339.
 * @property {string|null} error Why a failed flow failed.
 */

/**
 * The contract's registration object (without `clientToken`: a browser app never sees one).
 * @typedef {object} Registration
 * @property {string} id
 * @property {string} destination
 * @property {string} status `active`, `login_required`, `pending_approval`, `reconnect_required`
 * @property {Flow|null} flow The flow the registration waits on.
 */

/**
 * What `register` sends (`POST /v1/registrations`, with `"browser": true` added).
 * @typedef {object} RegistrationRequest
 * @property {string} destination One of the browser app's destinations.
 * @property {string} [returnUrl] Where a finished flow sends the window back: one of the
 *   app's `returnUrls`.
 * @property {string} [deviceType]
 * @property {string} [deviceModel]
 * @property {string} [userHint]
 * @property {string} [identityToken] An ID token of the app's own OpenID Connect sign-in.
 * @property {{username: string, password: string}} [credentials]
 */

/** A problem answer of Parley's (RFC 9457), thrown by `register`, `registration` and `logout`. */
export class ParleyError extends Error {
  /**
   * @param {number} status
   * @param {{code?: string, detail?: string, flow?: Flow}} problem
   * @param {Headers} headers
   */
  constructor(status, problem, headers) {
    super(problem.detail || `Parley answered ${status}`);
    this.name = "ParleyError";
    /** The HTTP status. @type {number} */
    this.status = status;
    /** The problem's stable code (`invalid_client_token`, `rate_limited`, …). @type {string} */
    this.code = problem.code || "unknown";
    /** The flow of an `interaction_required` answer. @type {Flow|undefined} */
    this.flow = problem.flow;
    const retry = Number(headers.get("Retry-After"));
    /** Seconds to wait before trying again, when Parley said. @type {number|undefined} */
    this.retryAfter = Number.isFinite(retry) && retry > 0 ? retry : undefined;
  }
}

/** Whether an answer is a problem of Parley's. @param {Response} response */
function isProblem(response) {
  return (response.headers.get("Content-Type") || "").startsWith("application/problem+json");
}

/** A client of one Parley for one browser app. */
export class Parley {
  /** @param {ParleyOptions} options */
  constructor(options) {
    /** @type {string} */
    this.url = String(options.url).replace(/\/+$/, "");
    /** @type {number|undefined} */
    this.wait = options.wait;
    /** @type {(url: string) => void} */
    this.navigate = options.navigate || ((url) => window.location.assign(url));
  }

  /**
   * Registers this browser with a destination. Parley sets the registration's cookie; the
   * answer carries no client token.
   * @param {RegistrationRequest} request
   * @returns {Promise<Registration>}
   */
  async register(request) {
    const response = await this.#send("POST", "/v1/registrations", {
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...request, browser: true }),
    });
    return /** @type {Promise<Registration>} */ (this.#json(response));
  }

  /**
   * This browser's registration, or `null` when it has none (or it was revoked).
   * @returns {Promise<Registration|null>}
   */
  async registration() {
    const response = await this.#send("GET", "/v1/registrations/me", {});
    if (response.status === 401) return null;
    return /** @type {Promise<Registration>} */ (this.#json(response));
  }

  /**
   * A call to the destination through Parley: `path` is below the destination's URL
   * (`"orders?$top=5"`). The answer is the upstream's, as `fetch` gives it. When a person
   * must sign in first, the window goes to the flow's page and the promise never settles:
   * the flow ends at the registration's `returnUrl`, where the app calls again.
   * @param {string} path
   * @param {RequestInit} [init]
   * @returns {Promise<Response>}
   */
  async fetch(path, init = {}) {
    const headers = new Headers(init.headers);
    if (this.wait) headers.set("Prefer", `wait=${Math.min(60, Math.max(1, Math.round(this.wait)))}`);
    const response = await this.#send(init.method || "GET", "/v1/proxy/" + String(path).replace(/^\/+/, ""), { ...init, headers });
    if (response.status === 401 && isProblem(response)) {
      const problem = await response.clone().json().catch(() => ({}));
      if (problem.code === "interaction_required" && problem.flow && problem.flow.url) {
        this.navigate(problem.flow.url);
        return new Promise(() => {});
      }
    }
    return response;
  }

  /**
   * Ends this browser's registration: Parley forgets it and expires its cookie.
   * @returns {Promise<void>}
   */
  async logout() {
    const response = await this.#send("DELETE", "/v1/registrations/me", {});
    if (response.status !== 204 && response.status !== 401) await this.#json(response);
  }

  /**
   * @param {string} method
   * @param {string} path
   * @param {RequestInit} init
   */
  #send(method, path, init) {
    const headers = new Headers(init.headers);
    headers.set("Parley-CSRF", "1");
    return fetch(this.url + path, { ...init, method, headers, credentials: "include", mode: "cors" });
  }

  /** @param {Response} response */
  async #json(response) {
    if (response.ok) return response.json();
    const problem = isProblem(response) ? await response.json().catch(() => ({})) : {};
    throw new ParleyError(response.status, problem, response.headers);
  }
}
