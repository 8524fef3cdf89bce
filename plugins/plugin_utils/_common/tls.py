# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the checks of a certificate, its key and (optionally) its CA that a role's preflight reads on the node with
openssl, as problem lines naming the role's variables. Shared by the anaconda role's Jupyter Lab and gpu_monitoring.

``found`` holds what preflight read: ``cert_exists``, ``key_exists`` (and ``ca_exists`` where a CA is given),
``cert_pubkey`` and ``key_pubkey`` (``openssl x509 -noout -pubkey``, ``openssl pkey -pubout``; empty when unread),
and where checked ``cert_expired`` (``openssl x509 -checkend 0`` said so), ``cert_enddate`` (its ``notAfter=`` line)
and ``ca_error`` (what ``openssl verify -CAfile`` said when it refused the certificate; empty when it accepted it).
"""


def certificate_problems(names, paths, found):
    """One line per problem with the files; [] when they can serve TLS.

    names: {"cert": variable, "key": variable, optionally "ca": variable}; paths: {"cert": path, "key": path,
    optionally "ca": path}, as given (all set: the caller checks which are required)."""
    cert, key, ca = paths["cert"], paths["key"], paths.get("ca")
    problems = []
    if not found.get("cert_exists"):
        problems.append("%s %s does not exist on this host; put the certificate there" % (names["cert"], cert))
    if not found.get("key_exists"):
        problems.append("%s %s does not exist on this host; put the key there" % (names["key"], key))
    if ca and not found.get("ca_exists"):
        problems.append("%s %s does not exist on this host; put the CA's certificate there" % (names["ca"], ca))
    if problems:
        return problems
    if not found.get("cert_pubkey") or not found.get("key_pubkey"):
        return ["openssl could not read the public key of %s %s or %s %s (PEM expected; is openssl installed?)"
                % (names["cert"], cert, names["key"], key)]
    if found["cert_pubkey"].strip() != found["key_pubkey"].strip():
        problems.append("%s %s does not match %s %s (their public keys differ); give the key the certificate was "
                        "issued for" % (names["cert"], cert, names["key"], key))
    if found.get("cert_expired"):
        enddate = str(found.get("cert_enddate") or "notAfter unknown").strip()
        problems.append("%s %s has expired (%s); renew it" % (names["cert"], cert, enddate))
    elif ca and found.get("ca_error"):
        problems.append("%s %s is not signed by %s %s (openssl verify: %s); give the CA that issued it"
                        % (names["cert"], cert, names["ca"], ca, " ".join(str(found["ca_error"]).split())))
    return problems
