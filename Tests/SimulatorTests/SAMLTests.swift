import Foundation
import ParleyEncoding
import ParleyTesting
import Testing
import UpstreamSimulator

@Suite("SAML2 service provider and mock IdP of the upstream simulator")
struct SAMLTests {
    @Test("the challenge comes in both bindings, with and without the identifying header")
    func challengeBindings() async throws {
        try await withSimulator { port, state in
            let base = directBase(port)
            let settings = try await get(port, "/control/sp")
            #expect(settings.json?["binding"] as? String == "postForm")
            #expect(settings.json?["identifyingHeader"] as? Bool == true)
            #expect(settings.json?["otp"] as? String == "off")

            for (binding, header) in [("postForm", true), ("postForm", false), ("redirect", true), ("redirect", false)] {
                #expect(try await setSP(port, #"{"binding":"\#(binding)","identifyingHeader":\#(header)}"#).status == 204)
                let challenge = try await get(port, "/sp/api/data?x=1")
                #expect(challenge.header("com.sap.cloud.security.login") == (header ? "login-request" : nil))
                let request: String
                let relayState: String?
                if binding == "postForm" {
                    #expect(challenge.status == 200)
                    #expect(challenge.header("Content-Type")?.hasPrefix("text/html") == true)
                    #expect(formAction(challenge) == "http://127.0.0.1:\(port)/idp/sso")
                    let inputs = hiddenInputs(challenge)
                    request = try #require(inputs["SAMLRequest"])
                    relayState = inputs["RelayState"]
                } else {
                    #expect(challenge.status == 302)
                    let location = try #require(challenge.header("Location"))
                    #expect(location.hasPrefix("http://127.0.0.1:\(port)/idp/sso?SAMLRequest="))
                    request = try #require(queryItems(location)["SAMLRequest"])
                    relayState = queryItems(location)["RelayState"]
                }
                #expect(relayState == base + "/api/data?x=1")
                let xml = decodedXML(request)
                #expect(xml.hasPrefix("<samlp:AuthnRequest "))
                #expect(xmlAttribute("AssertionConsumerServiceURL", in: xml) == base + "/saml/acs")
                #expect(xmlAttribute("ID", in: xml)?.isEmpty == false)
                #expect(xmlAttribute("IssueInstant", in: xml) != nil)
                #expect(xml.contains("<saml:Issuer>\(base)</saml:Issuer>"))
            }
            #expect(state.saml.authnRequestsIssued == 4)
            #expect(state.saml.settings == SPSettings(binding: .redirect, identifyingHeader: false, otp: .off))
            #expect(try await setSP(port, #"{"binding":"deflate"}"#).status == 400)
            #expect(state.saml.settings.binding == .redirect)
        }
    }

    @Test("external URLs come from X-Forwarded-* when X-Forwarded-Host is present, from Host and /sp otherwise")
    func externalURLs() async throws {
        try await withSimulator(SimulatorConfiguration(samlBinding: .redirect)) { port, _ in
            func challenge(_ target: String, _ headers: [(String, String)]) async throws -> (acs: String?, issuer: String, relay: String?) {
                let location = try #require(try await get(port, target, headers).header("Location"))
                let xml = decodedXML(try #require(queryItems(location)["SAMLRequest"]))
                let issuer = try #require(xml.components(separatedBy: "<saml:Issuer>").last?.components(separatedBy: "<").first)
                return (xmlAttribute("AssertionConsumerServiceURL", in: xml), issuer, queryItems(location)["RelayState"])
            }
            let proxied = try await challenge(
                "/sp/csrf/items?a=b%20c",
                [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "parley.example:8443"), ("X-Forwarded-Prefix", "/web/sp/")])
            #expect(proxied.acs == "https://parley.example:8443/web/sp/saml/acs")
            #expect(proxied.issuer == "https://parley.example:8443/web/sp")
            #expect(proxied.relay == "https://parley.example:8443/web/sp/csrf/items?a=b%20c")

            let parley = try await challenge("/sp/SAMLAuthLauncher", parleyForwarded)
            #expect(parley.acs == parleyACS)
            #expect(parley.relay == parleyBase + "/SAMLAuthLauncher")

            let hostOnly = try await challenge("/sp/api/data", [("X-Forwarded-Host", "front.example")])
            #expect(hostOnly.acs == "http://front.example/saml/acs")

            let direct = try await challenge("/sp/api/data", [("X-Forwarded-Prefix", "/ignored")])
            #expect(direct.acs == "http://127.0.0.1:\(port)/sp/saml/acs")
            #expect(direct.issuer == "http://127.0.0.1:\(port)/sp")
            #expect(direct.relay == "http://127.0.0.1:\(port)/sp/api/data")
        }
    }

    @Test("the IdP refuses an AuthnRequest whose ACS URL is not registered, and accepts it once registered")
    func unregisteredACS() async throws {
        try await withSimulator { port, state in
            let challenge = hiddenInputs(try await get(port, "/sp/api/data", parleyForwarded))
            let fields = [("SAMLRequest", try #require(challenge["SAMLRequest"])), ("RelayState", try #require(challenge["RelayState"]))]

            let refused = try await postForm(port, "/idp/sso", fields)
            #expect(refused.status == 400)
            #expect(refused.text.contains("ACS URL not registered"))
            let refusedLogin = try await postForm(port, "/idp/login", fields + [("username", "alice"), ("password", "wonderland")])
            #expect(refusedLogin.status == 400)
            #expect(!refusedLogin.text.contains("SAMLResponse"))
            #expect(state.saml.unregisteredACSRefusals == 2)
            #expect(state.saml.idpLogins == 0)

            #expect(try await registerACS(port, ["http://elsewhere.example/saml/acs", parleyACS]).status == 204)
            let listed = try await get(port, "/control/saml/acs")
            #expect(try JSONSerialization.jsonObject(with: Data(listed.body)) as? [String] == ["http://elsewhere.example/saml/acs", parleyACS])
            #expect(state.saml.registeredACSURLs == ["http://elsewhere.example/saml/acs", parleyACS])
            let page = try await postForm(port, "/idp/sso", fields)
            #expect(page.status == 200)
            for needle in [
                #"<label for="username">"#, #"<input id="username" name="username""#, #"<label for="password">"#,
                #"type="password""#, #"action="/idp/login""#,
            ] {
                #expect(page.text.contains(needle))
            }
            #expect(hiddenInputs(page)["SAMLRequest"] == fields[0].1)
            #expect(hiddenInputs(page)["RelayState"] == parleyBase + "/api/data")

            // The redirect binding's GET works the same way.
            let viaGet = try await get(port, "/idp/sso?SAMLRequest=\(urlEncode(fields[0].1))&RelayState=\(urlEncode(fields[1].1))")
            #expect(viaGet.status == 200)
            #expect(viaGet.text.contains(#"<input id="password""#))

            let garbage = try await postForm(port, "/idp/sso", [("SAMLRequest", "bm90IFhNTA==")])
            #expect(garbage.status == 400)
            #expect(try await registerACS(port, []).status == 204)
            #expect(try await postForm(port, "/idp/sso", fields).status == 400)
            let badControl = try await RawHTTP.request(port: port, method: "POST", target: "/control/saml/acs", body: Array("{}".utf8))
            #expect(badControl.status == 400)
        }
    }

    @Test("login at the IdP, assertion at the ACS, session cookie, then /sp/api/data")
    func fullLogin() async throws {
        try await withSimulator(SimulatorConfiguration(samlACSURLs: [parleyACS])) { port, state in
            let challenge = try await get(port, "/sp/api/data?full=1", parleyForwarded)
            let inputs = hiddenInputs(challenge)
            let request = try #require(inputs["SAMLRequest"])
            let requestID = try #require(xmlAttribute("ID", in: decodedXML(request)))

            let wrong = try await postForm(
                port, "/idp/login",
                [("username", "alice"), ("password", "nope"), ("SAMLRequest", request), ("RelayState", inputs["RelayState"] ?? "")])
            #expect(wrong.status == 200)
            #expect(wrong.text.contains(#"role="alert""#))
            #expect(hiddenInputs(wrong)["SAMLRequest"] == request)
            #expect(state.saml.idpLoginFailures == 1)

            let answer = try await signInAtIdP(port, target: "/sp/api/data?full=1", headers: parleyForwarded)
            #expect(answer.acsURL == parleyACS)
            #expect(answer.relayState == parleyBase + "/api/data?full=1")
            #expect(answer.page.text.contains(#"<body onload="document.forms[0].submit()">"#))
            #expect(answer.page.text.contains(#"<button id="continue" type="submit">Continue</button>"#))
            let xml = decodedXML(answer.samlResponse)
            #expect(xml.hasPrefix("<samlp:Response "))
            #expect(xmlAttribute("Destination", in: xml) == parleyACS)
            #expect(xmlAttribute("InResponseTo", in: xml) == answer.requestID)
            #expect(answer.requestID != requestID, "each challenge has its own AuthnRequest")
            #expect(xml.contains(">alice</saml:NameID>"))
            #expect(xml.contains("<saml:Audience>\(parleyBase)</saml:Audience>"))
            #expect(xml.contains("<ds:SignatureValue>"))
            let notOnOrAfter = try #require(xmlAttribute("NotOnOrAfter", in: xml).flatMap { try? Date($0, strategy: .iso8601) })
            #expect(notOnOrAfter > Date().addingTimeInterval(240) && notOnOrAfter <= Date().addingTimeInterval(301))

            let acs = try await postToACS(port, answer, headers: parleyForwarded)
            #expect(acs.status == 302)
            #expect(acs.header("Location") == parleyBase + "/api/data?full=1")
            let session = try #require(setCookie("SP_SESSION", in: acs))
            #expect(acs.header("Set-Cookie") == "SP_SESSION=\(session); Path=/sp; HttpOnly")
            #expect(state.saml.assertionsAccepted == 1)

            let data = try await get(port, "/sp/api/data", parleyForwarded + [("Cookie", "SP_SESSION=\(session)")])
            #expect(data.status == 200)
            #expect(data.text == #"{"user":"alice","via":"saml"}"#)
            let direct = try await get(port, "/sp/api/data", [("Cookie", "SP_SESSION=\(session)")])
            #expect(direct.json?["user"] as? String == "alice", "the session does not depend on the forwarded headers")

            let forged = try await get(port, "/sp/api/data", [("Cookie", "SP_SESSION=forged")])
            #expect(forged.status == 200)
            #expect(forged.header("com.sap.cloud.security.login") == "login-request")
            let unknown = try await get(port, "/sp/nothing-here", [("Cookie", "SP_SESSION=\(session)")])
            #expect(unknown.status == 404)

            #expect(try await RawHTTP.request(port: port, method: "POST", target: "/sim/sessions/expire").status == 204)
            let expired = try await get(port, "/sp/api/data", [("Cookie", "SP_SESSION=\(session)")])
            #expect(expired.header("com.sap.cloud.security.login") == "login-request")
            #expect(state.saml.authnRequestsIssued == 4)
        }
    }

    @Test("the ACS refuses tampered, misaddressed, replayed, garbage and expired responses with 403")
    func refusedResponses() async throws {
        try await withSimulator(SimulatorConfiguration(samlACSURLs: [parleyACS])) { port, state in
            let answer = try await signInAtIdP(port, target: "/sp/api/data", headers: parleyForwarded)
            let xml = decodedXML(answer.samlResponse)
            func encoded(_ text: String) -> String { Base64.encode(Array(text.utf8)) }

            let otherUser = encoded(xml.replacingOccurrences(of: ">alice</saml:NameID>", with: ">mallory</saml:NameID>"))
            let tampered = try await postToACS(port, answer, samlResponse: otherUser, headers: parleyForwarded)
            #expect(tampered.status == 403)
            #expect(tampered.text.contains("signature"))
            #expect(setCookie("SP_SESSION", in: tampered) == nil)

            // Destination is outside the signed assertion, but must still be this ACS.
            let redirected = encoded(xml.replacingOccurrences(of: #"Destination="\#(parleyACS)""#, with: #"Destination="http://evil.example/acs""#))
            #expect(redirected != answer.samlResponse)
            let misaddressed = try await postToACS(port, answer, samlResponse: redirected, headers: parleyForwarded)
            #expect(misaddressed.status == 403)
            #expect(misaddressed.text.contains("Destination"))

            // Posted directly, the ACS URL is http://127.0.0.1:<port>/sp/saml/acs, not the one the response names.
            let direct = try await postToACS(port, answer, headers: [])
            #expect(direct.status == 403)

            let garbage = try await postToACS(port, answer, samlResponse: "%%%", headers: parleyForwarded)
            #expect(garbage.status == 403)
            let missing = try await postForm(port, "/sp/saml/acs", [], headers: parleyForwarded)
            #expect(missing.status == 403)

            let accepted = try await postToACS(port, answer, headers: parleyForwarded)
            #expect(accepted.status == 302)
            let replayed = try await postToACS(port, answer, headers: parleyForwarded)
            #expect(replayed.status == 403)
            #expect(replayed.text.contains("used before"))
            #expect(setCookie("SP_SESSION", in: replayed) == nil)

            #expect(state.saml.assertionsAccepted == 1)
            #expect(state.saml.assertionsRejected == 6)
        }

        try await withSimulator(SimulatorConfiguration(samlACSURLs: [parleyACS], samlAssertionLifetime: .zero)) { port, state in
            let answer = try await signInAtIdP(port, target: "/sp/api/data", headers: parleyForwarded)
            let expired = try await postToACS(port, answer, headers: parleyForwarded)
            #expect(expired.status == 403)
            #expect(expired.text.contains("expired"))
            #expect(state.saml.assertionsRejected == 1)
        }
    }

    @Test("finish endpoint: challenge without a session, then the finishEndpointParam redirect, then signed in")
    func finishEndpoint() async throws {
        try await withSimulator(SimulatorConfiguration(samlACSURLs: [parleyACS])) { port, _ in
            let challenge = try await get(port, "/sp/SAMLAuthLauncher", parleyForwarded)
            #expect(challenge.status == 200)
            #expect(hiddenInputs(challenge)["RelayState"] == parleyBase + "/SAMLAuthLauncher")

            let (acs, cookie) = try await signInToSP(port, target: "/sp/SAMLAuthLauncher")
            #expect(acs.header("Location") == parleyBase + "/SAMLAuthLauncher")
            let launcher = try await get(port, "/sp/SAMLAuthLauncher", parleyForwarded + [cookie])
            #expect(launcher.status == 302)
            #expect(launcher.header("Location") == parleyBase + "/SAMLAuthLauncher?finishEndpointParam=done")
            let finished = try await get(port, "/sp/SAMLAuthLauncher?finishEndpointParam=done", parleyForwarded + [cookie])
            #expect(finished.status == 200)
            #expect(finished.header("Content-Type")?.hasPrefix("text/html") == true)
            #expect(finished.text.contains("signed in"))
        }
    }

    @Test("SMP registration, DELETE and CSRF work behind the SAML session")
    func smpBehindSAML() async throws {
        try await withSimulator(SimulatorConfiguration(samlACSURLs: [parleyACS])) { port, state in
            let path = "/sp/odata/applications/latest/com.example.app/Connections"
            let json = ("Content-Type", "application/json")
            let body = Array(#"{"DeviceType":"Android"}"#.utf8)
            let anonymous = try await RawHTTP.request(
                port: port, method: "POST", target: path, headers: parleyForwarded + [json, basicAuthorization()], body: body)
            #expect(anonymous.status == 200, "Basic is no way in at /sp: the answer is the SAML challenge")
            #expect(anonymous.header("com.sap.cloud.security.login") == "login-request")
            #expect(state.smp.registeredAppcids.isEmpty)

            let (_, cookie) = try await signInToSP(port)
            let created = try await RawHTTP.request(port: port, method: "POST", target: path, headers: parleyForwarded + [cookie, json], body: body)
            #expect(created.status == 201)
            let appcid = try #require(setCookie("X-SMP-APPCID", in: created))
            #expect((created.json?["d"] as? [String: Any])?["ApplicationConnectionId"] as? String == appcid)
            #expect(setCookie("SMPSESSION", in: created) == nil)
            #expect(state.smp.registrations[appcid]?.appId == "com.example.app")
            #expect(state.requests(route: "POST /sp/odata/Connections") == 1)

            let deleted = try await RawHTTP.request(
                port: port, method: "DELETE", target: "/sp/odata/applications/latest/com.example.app/Connections('\(appcid)')",
                headers: [cookie])
            #expect(deleted.status == 200)
            #expect(state.smp.deletedAppcids == [appcid])

            let fetched = try await RawHTTP.request(port: port, method: "GET", target: "/sp/csrf/items", headers: [cookie, ("X-CSRF-Token", "Fetch")])
            #expect(fetched.status == 200)
            let token = try #require(fetched.header("X-CSRF-Token"))
            let payload = Array("payload".utf8)
            let missing = try await RawHTTP.request(port: port, method: "POST", target: "/sp/csrf/items", headers: [cookie], body: payload)
            #expect(missing.status == 403)
            #expect(missing.header("X-CSRF-Token") == "Required")
            let accepted = try await RawHTTP.request(
                port: port, method: "POST", target: "/sp/csrf/items", headers: [cookie, ("X-CSRF-Token", token)], body: payload)
            #expect(accepted.status == 201)
            #expect(accepted.json?["bytes"] as? Int == payload.count)
            #expect(state.smp.csrfRejections == 1)
            #expect(state.smp.csrfAccepted == 1)

            // The root SMP is untouched: Basic still works there, the SP cookie does not.
            let root = try await RawHTTP.request(port: port, method: "GET", target: "/api/appcid", headers: [cookie])
            #expect(root.status == 401)
        }
    }
}

@Suite("OTP after SAML and after Basic in the upstream simulator")
struct OTPTests {
    @Test("OTP after SAML: challenge, wrong passcode refused, right one redirects to finished=true")
    func otpAfterSAML() async throws {
        try await withSimulator(SimulatorConfiguration(spOTP: .afterSAML, samlACSURLs: [parleyACS])) { port, state in
            let (acs, cookie) = try await signInToSP(port)
            #expect(acs.status == 302)
            #expect(acs.header("x-smp-authentication") == "otp-challenge")
            #expect(acs.header("Location") == parleyBase + "/otp")

            for target in ["/sp/api/data", "/sp/SAMLAuthLauncher"] {
                let pending = try await get(port, target, parleyForwarded + [cookie])
                #expect(pending.status == 302)
                #expect(pending.header("x-smp-authentication") == "otp-challenge")
                #expect(pending.header("Location") == parleyBase + "/otp")
            }

            let target = "/sp/otp?redirecttooriginalurl=false"
            let form = try await get(port, target, parleyForwarded + [cookie])
            #expect(form.status == 200)
            #expect(formAction(form) == parleyBase + "/otp?redirecttooriginalurl=false")
            for needle in [#"<label for="passcode">"#, #"name="passcode""#, #"inputmode="numeric""#, #"autocomplete="one-time-code""#, "sapauthenticator://"] {
                #expect(form.text.contains(needle))
            }

            let code = try await currentPasscode(port)
            #expect(code.count == 6 && code.allSatisfy(\.isNumber))
            let wrongCode = String(code.map { $0 == "9" ? "0" : Character(String(($0.wholeNumberValue ?? 0) + 1)) })
            let wrong = try await postForm(port, target, [("passcode", wrongCode)], headers: parleyForwarded + [cookie])
            #expect(wrong.status == 200)
            #expect(wrong.text.contains(#"role="alert""#))
            #expect(state.otp.rejectedPasscodes == 1)
            #expect(try await get(port, "/sp/api/data", parleyForwarded + [cookie]).status == 302)

            let stranger = try await postForm(port, target, [("passcode", code)], headers: parleyForwarded)
            #expect(stranger.status == 403, "the session is the cookie's")

            let right = try await postForm(port, target, [("passcode", code)], headers: parleyForwarded + [cookie])
            #expect(right.status == 302)
            #expect(right.header("Location") == parleyBase + "/otp/finished?finished=true")
            let finished = try await get(port, "/sp/otp/finished?finished=true", parleyForwarded + [cookie])
            #expect(finished.status == 200)
            #expect(finished.text.contains("done"))

            let data = try await get(port, "/sp/api/data", parleyForwarded + [cookie])
            #expect(data.status == 200)
            #expect(data.json?["via"] as? String == "saml")
            #expect(state.otp.verifications == 1)
            #expect(state.otp.challenges == 4)
        }
    }

    @Test("OTP switched on at run time; without redirecttooriginalurl=false the right passcode returns to RelayState")
    func otpOriginalURL() async throws {
        try await withSimulator(SimulatorConfiguration(samlACSURLs: [parleyACS])) { port, state in
            #expect(try await setSP(port, #"{"otp":"afterSAML"}"#).status == 204)
            let (acs, cookie) = try await signInToSP(port, target: "/sp/SAMLAuthLauncher")
            #expect(acs.header("x-smp-authentication") == "otp-challenge")
            let right = try await postForm(port, "/sp/otp", [("passcode", try await currentPasscode(port))], headers: parleyForwarded + [cookie])
            #expect(right.status == 302)
            #expect(right.header("Location") == parleyBase + "/SAMLAuthLauncher")
            let launcher = try await get(port, "/sp/SAMLAuthLauncher", parleyForwarded + [cookie])
            #expect(launcher.header("Location") == parleyBase + "/SAMLAuthLauncher?finishEndpointParam=done")
            #expect(state.otp.verifications == 1)
        }
    }

    @Test("/basic-otp: Basic first, then the OTP, then the data")
    func basicThenOTP() async throws {
        try await withSimulator { port, state in
            let forwarded = [("X-Forwarded-Host", "127.0.0.1:8080"), ("X-Forwarded-Prefix", "/web/bo")]
            let none = try await get(port, "/basic-otp/api/data", forwarded)
            #expect(none.status == 401)
            #expect(none.header("WWW-Authenticate") == "Basic realm=\"basic-otp\"")
            let wrong = try await get(port, "/basic-otp/api/data", forwarded + [basicAuthorization("alice", "nope")])
            #expect(wrong.status == 401)
            #expect(setCookie("BO_SESSION", in: wrong) == nil)

            let basic = try await get(port, "/basic-otp/api/data", forwarded + [basicAuthorization()])
            #expect(basic.status == 302)
            #expect(basic.header("x-smp-authentication") == "otp-challenge")
            #expect(basic.header("Location") == "http://127.0.0.1:8080/web/bo/otp")
            let session = try #require(setCookie("BO_SESSION", in: basic))
            #expect(basic.header("Set-Cookie") == "BO_SESSION=\(session); Path=/basic-otp; HttpOnly")
            let cookie = ("Cookie", "BO_SESSION=\(session)")

            let direct = try await get(port, "/basic-otp/api/data", [cookie])
            #expect(direct.status == 302)
            #expect(direct.header("Location") == "http://127.0.0.1:\(port)/basic-otp/otp")

            let form = try await get(port, "/basic-otp/otp?redirecttooriginalurl=false", forwarded + [cookie])
            #expect(formAction(form) == "http://127.0.0.1:8080/web/bo/otp?redirecttooriginalurl=false")
            let noSession = try await postForm(
                port, "/basic-otp/otp?redirecttooriginalurl=false", [("passcode", try await currentPasscode(port))], headers: forwarded)
            #expect(noSession.status == 403)
            let right = try await postForm(
                port, "/basic-otp/otp?redirecttooriginalurl=false", [("passcode", try await currentPasscode(port))],
                headers: forwarded + [cookie])
            #expect(right.status == 302)
            #expect(right.header("Location") == "http://127.0.0.1:8080/web/bo/otp/finished?finished=true")
            #expect(try await get(port, "/basic-otp/otp/finished?finished=true", forwarded).text.contains("done"))

            let data = try await get(port, "/basic-otp/api/data", forwarded + [cookie])
            #expect(data.status == 200)
            #expect(data.text == #"{"user":"alice","via":"basic-otp"}"#)
            #expect(state.otp.verifications == 1)
            #expect(state.otp.challenges == 2)
        }
    }

    @Test("GET /control/otp/code gives a passcode the OTP form accepts; /sim/stats carries the SAML and OTP counters")
    func controls() async throws {
        try await withSimulator { port, state in
            let code = try await currentPasscode(port)
            #expect(code.count == 6)
            let bob = try await currentPasscode(port, user: "bob")
            #expect(bob.count == 6)
            #expect(try await get(port, "/control/otp/code").status == 400)

            let challenged = try await get(port, "/basic-otp/api/data", [basicAuthorization()])
            let cookie = ("Cookie", "BO_SESSION=\(try #require(setCookie("BO_SESSION", in: challenged)))")
            let accepted = try await postForm(port, "/basic-otp/otp", [("passcode", code)], headers: [cookie])
            #expect(accepted.status == 302)
            #expect(accepted.header("Location") == "http://127.0.0.1:\(port)/basic-otp/api/data", "back to the original URL")

            _ = try await get(port, "/sp/api/data")
            let response = try await get(port, "/sim/stats")
            let stats = try JSONDecoder().decode(SimulatorStats.self, from: Data(response.body))
            #expect(stats.otp.verifications == 1)
            #expect(stats.otp.challenges == 1)
            #expect(stats.saml.authnRequestsIssued == 1)
            #expect(stats.saml == state.stats.saml)
            #expect(stats.otp == state.stats.otp)
        }
    }
}

@Suite("Session-cookie scope of /sp and /basic-otp behind a proxy")
struct CookieScopeTests {
    /// What follows `{cookie}={id}` in a cookie set through `parleyForwarded` (prefix `/web/sp`,
    /// host `127.0.0.1:8080`), up to `; HttpOnly`.
    static func forwardedAttributes(_ scope: SPCookieScope, domain: Bool) -> String {
        let path =
            switch scope {
            case .mount: "/sp"
            case .forwardedPrefix: "/web/sp"
            case .forwardedPrefixSlash: "/web/sp/"
            }
        return "; Path=\(path)" + (domain ? "; Domain=127.0.0.1" : "")
    }

    @Test(
        "a full login through forwarded headers scopes SP_SESSION as the settings say; reached directly it keeps Path=/sp",
        arguments: SPCookieScope.allCases, [false, true])
    func samlLogin(scope: SPCookieScope, domain: Bool) async throws {
        let configuration = SimulatorConfiguration(spCookieScope: scope, spCookieDomain: domain)
        try await withSimulator(configuration) { port, state in
            #expect(state.saml.settings.cookieScope == scope)
            #expect(state.saml.settings.cookieDomain == domain)
            #expect(try await registerACS(port, [parleyACS, directBase(port) + "/saml/acs"]).status == 204)

            let (proxied, cookie) = try await signInToSP(port, target: "/sp/SAMLAuthLauncher")
            #expect(proxied.status == 302)
            #expect(proxied.header("Location") == parleyBase + "/SAMLAuthLauncher")
            let session = try #require(setCookie("SP_SESSION", in: proxied))
            #expect(proxied.header("Set-Cookie") == "SP_SESSION=\(session)\(Self.forwardedAttributes(scope, domain: domain)); HttpOnly")
            let finished = try await get(port, "/sp/SAMLAuthLauncher?finishEndpointParam=done", parleyForwarded + [cookie])
            #expect(finished.status == 200)
            #expect(finished.text.contains("signed in"))

            let (direct, directCookie) = try await signInToSP(port, target: "/sp/api/data", headers: [])
            #expect(direct.header("Location") == directBase(port) + "/api/data")
            let directSession = try #require(setCookie("SP_SESSION", in: direct))
            #expect(direct.header("Set-Cookie") == "SP_SESSION=\(directSession); Path=/sp; HttpOnly", "no proxy, no prefix and no domain")
            #expect(try await get(port, "/sp/api/data", [directCookie]).json?["user"] as? String == "alice")
            #expect(state.saml.assertionsAccepted == 2)
        }
    }

    @Test("POST /control/sp changes the cookie scope and domain at run time; /basic-otp follows them; unknown values are refused")
    func controlsAndBasicOTP() async throws {
        try await withSimulator { port, state in
            let initial = try await get(port, "/control/sp")
            #expect(initial.json?["cookieScope"] as? String == "mount")
            #expect(initial.json?["cookieDomain"] as? Bool == false)

            /// The attributes of the `BO_SESSION` cookie that Basic opens with `headers`.
            func basicOTPCookie(_ headers: [(String, String)]) async throws -> String {
                let answer = try await get(port, "/basic-otp/api/data", headers + [basicAuthorization()])
                #expect(answer.status == 302)
                let session = try #require(setCookie("BO_SESSION", in: answer))
                let header = try #require(answer.header("Set-Cookie"))
                return String(header.dropFirst("BO_SESSION=\(session)".count))
            }
            let proxied = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "parley.example:8443"), ("X-Forwarded-Prefix", "/web/bo/")]
            let atRoot = [("X-Forwarded-Host", "parley.example"), ("X-Forwarded-Prefix", "/")]
            let noPrefix = [("X-Forwarded-Host", "[::1]:8080")]
            let prefixOnly = [("X-Forwarded-Prefix", "/ignored")]
            #expect(try await basicOTPCookie(proxied) == "; Path=/basic-otp; HttpOnly")

            #expect(try await setSP(port, #"{"cookieScope":"forwardedPrefixSlash","cookieDomain":true}"#).status == 204)
            #expect(state.saml.settings == SPSettings(cookieScope: .forwardedPrefixSlash, cookieDomain: true))
            #expect(try await get(port, "/control/sp").json?["cookieScope"] as? String == "forwardedPrefixSlash")
            #expect(try await basicOTPCookie(proxied) == "; Path=/web/bo/; Domain=parley.example; HttpOnly")
            #expect(try await basicOTPCookie(atRoot) == "; Path=/; Domain=parley.example; HttpOnly")
            #expect(try await basicOTPCookie(noPrefix) == "; Path=/basic-otp; Domain=[::1]; HttpOnly")
            #expect(try await basicOTPCookie(prefixOnly) == "; Path=/basic-otp; HttpOnly")
            #expect(try await basicOTPCookie([]) == "; Path=/basic-otp; HttpOnly")

            #expect(try await setSP(port, #"{"cookieScope":"forwardedPrefix"}"#).status == 204)
            #expect(state.saml.settings == SPSettings(cookieScope: .forwardedPrefix, cookieDomain: true), "a partial change")
            #expect(try await setSP(port, #"{"cookieDomain":false}"#).status == 204)
            #expect(try await basicOTPCookie(proxied) == "; Path=/web/bo; HttpOnly")
            #expect(try await basicOTPCookie(atRoot) == "; Path=/; HttpOnly")
            #expect(try await basicOTPCookie(prefixOnly) == "; Path=/basic-otp; HttpOnly")

            for refused in [#"{"cookieScope":"context"}"#, #"{"cookieScope":null,"cookieDomain":"yes"}"#, #"{"cookieScope":1}"#] {
                let answer = try await setSP(port, refused)
                #expect(answer.status == 400, "\(refused)")
                #expect(answer.text.contains("forwardedPrefixSlash"))
            }
            #expect(state.saml.settings == SPSettings(cookieScope: .forwardedPrefix, cookieDomain: false))
        }
    }
}
