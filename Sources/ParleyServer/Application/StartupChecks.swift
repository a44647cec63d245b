import AuthFlows
public import Logging

/// Before an instance serves: what `parley serve` does once, outside `compose` (which only
/// composes): it tells the operator about risky destinations at every start, and removes the
/// spool files an earlier process left behind.
public enum StartupChecks {
    /// The destinations' settings an operator should hear about at every start: an open
    /// registration policy on shared credentials, and (where identity providers are listed) a
    /// destination that still lets a registration without a verified user start a sign-in.
    public static func warnAboutDestinations(_ configuration: ParleyConfiguration, logger: Logger) {
        for destination in configuration.destinations.values.sorted(by: { $0.name < $1.name })
        where destination.registrationPolicy == .open && destination.holdsSharedCredentials {
            logger.warning(
                "anyone who can reach Parley may register with this destination and use its shared credentials; set registration.policy",
                metadata: ["destination": .string(destination.name)])
        }
        // Consent phishing: where identity providers are listed, a destination that still lets a
        // registration without a verified user start a sign-in says so at every start.
        if !configuration.identityProviders.isEmpty {
            for destination in configuration.destinations.values.sorted(by: { $0.name < $1.name }) where destination.identityOptionalWithSignIn {
                logger.warning(
                    "registration.identity is optional: a registration without a verified user can start a sign-in here, and whoever finishes it becomes its user; prefer required",
                    metadata: ["destination": .string(destination.name)])
            }
        }
    }

    /// Before an instance serves: the spool files an earlier process left behind go (only possible
    /// where the file system has no `O_TMPFILE` and that process died between create and unlink).
    /// Run by `parley serve` before `buildApplication`, so no request of this process has a spool
    /// file yet; `compose` only composes.
    public static func sweepSpool(_ configuration: ParleyConfiguration, logger: Logger) {
        let swept = Spool(directory: configuration.bodies.spoolDirectory, quotaBytes: configuration.bodies.spoolQuotaBytes).sweep()
        if swept > 0 { logger.warning("removed spool files an earlier process left behind", metadata: ["spool.files": "\(swept)"]) }
    }
}
