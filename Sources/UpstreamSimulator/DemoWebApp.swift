import Hummingbird

/// `GET /demo/shop.html?parley=<Parley's URL>`: a web app of the demo, on the simulator's origin
/// (another origin than Parley's), that uses Parley's ES module as a browser app would: it
/// registers this browser with `demo-oauth` (`browserApps` in the demo's destinations file), calls
/// `/hello` through Parley, is sent to sign in when a person must, and on its way back calls again
/// and shows the answer. It never sees a token: Parley's cookie is `HttpOnly`.
func addDemoWebAppRoutes(to router: Router<BasicRequestContext>, state: SimulatorState) {
    router.get("/demo/shop.html") { _, _ -> Response in
        state.record("GET /demo/shop.html")
        return SimHTTP.html(demoShopPage)
    }
}

/// The page: plain HTML and a module script; the answer lands in `#answer` with `data-status`.
let demoShopPage = """
    <!doctype html>
    <html lang="en"><head><meta charset="utf-8"><title>Demo shop</title></head>
    <body><main><h1>Demo shop</h1>
    <p>A web app on another origin than Parley's, calling <code>demo-oauth</code> through it.</p>
    <pre id="answer" data-status="pending">…</pre>
    <p><button id="logout" type="button">Log out</button></p></main>
    <script type="module">
      const parleyURL = new URLSearchParams(location.search).get("parley");
      const show = (status, text) => {
        const answer = document.getElementById("answer");
        answer.dataset.status = String(status);
        answer.textContent = text;
      };
      if (!parleyURL) {
        show("error", "open this page as /demo/shop.html?parley=<Parley's URL>");
      } else {
        const { Parley, ParleyError } = await import(parleyURL.replace(/\\/+$/, "") + "/sdk/parley.js");
        const parley = new Parley({ url: parleyURL });
        const home = location.origin + location.pathname + "?parley=" + encodeURIComponent(parleyURL);
        document.getElementById("logout").onclick = async () => { await parley.logout(); show("logged-out", "logged out"); };
        try {
          if (!(await parley.registration())) await parley.register({ destination: "demo-oauth", deviceType: "browser", returnUrl: home });
          const answer = await parley.fetch("hello");
          show(answer.status, await answer.text());
        } catch (error) {
          show("error", error instanceof ParleyError ? error.code + ": " + error.message : String(error));
        }
      }
    </script></body></html>
    """
