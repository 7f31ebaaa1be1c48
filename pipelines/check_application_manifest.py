"""Refuses a Service Fabric application whose code would run as an account that can read the cluster
certificate's private key. The pipeline's Build stage runs it on the packaged ApplicationManifest.xml.

Why: the standalone deployer makes the cluster certificate an admin client certificate
(StandAloneFabricSettingsGenerator.AddCertificateSecuritySections seeds AdminClientCertThumbprints
with the cluster thumbprint) and it is the nodes' own identity on the federation ports; its private
key is readable by NETWORK SERVICE on every node (userdata/prepare_node.ps1 grants it, as Fabric.exe
runs as NETWORK SERVICE), and a code package without a RunAs policy runs as the account Fabric runs
as ("Configure security policies for your application": by default, applications run under the
account the Fabric.exe process runs under). So every code package must run as a principal that is
neither NETWORK SERVICE nor LocalSystem, nor a member of Administrators (directly or through a
group of the manifest): a LocalUser of the manifest's Principals (the default AccountType) or
LocalService.

    python pipelines/check_application_manifest.py PATH/ApplicationManifest.xml

The manifest must have a DefaultRunAsPolicy (the code packages no RunAsPolicy names run under it; the
application manifest alone cannot list them), and every policy must name such a principal. Exit 0
and one line when it holds; otherwise one line per problem and exit 1; exit 2 for a file that is
not an application manifest.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

NS = {"sf": "http://schemas.microsoft.com/2011/01/fabric"}
# AccountType values of a Principals/Users/User (ServiceFabricServiceModel.xsd, AccountType: LocalUser
# when absent); the two that can read the key.
REFUSED_ACCOUNT_TYPES = {"NetworkService", "LocalSystem"}
# What a node's own account store can vouch for; a domain user or a managed service account is
# another directory's, which no one here has reviewed.
ALLOWED_ACCOUNT_TYPES = {"LocalUser", "LocalService", *REFUSED_ACCOUNT_TYPES}


def problems(manifest: ET.Element) -> list[str]:
    users = {u.get("Name"): u for u in manifest.findall("sf:Principals/sf:Users/sf:User", NS)}
    # A user's groups of the manifest (MemberOf/Group NameRef) and the system groups they belong to
    # (Principals/Groups/Group/Membership/SystemGroup): an administrator through a group is one too.
    group_systems = {g.get("Name"): {s.get("Name") for s in g.findall("sf:Membership/sf:SystemGroup", NS)}
                     for g in manifest.findall("sf:Principals/sf:Groups/sf:Group", NS)}  # fmt: skip
    default = manifest.find("sf:Policies/sf:DefaultRunAsPolicy", NS)
    found = []

    def refused(user_ref: str | None, where: str) -> None:
        user = users.get(user_ref or "")
        if user is None:
            found.append(f"{where}: runs as '{user_ref}', which is not a user of the manifest's Principals")
            return
        account_type = user.get("AccountType", "LocalUser")
        groups = {g.get("Name") for g in user.findall("sf:MemberOf/sf:SystemGroup", NS)}
        for group in user.findall("sf:MemberOf/sf:Group", NS):
            groups |= group_systems.get(group.get("NameRef"), set())
        if account_type not in ALLOWED_ACCOUNT_TYPES:
            found.append(f"{where}: runs as a {account_type} account; use a LocalUser (or LocalService)")
        elif account_type in REFUSED_ACCOUNT_TYPES:
            found.append(f"{where}: runs as {account_type}, which can read the cluster certificate's key; use a LocalUser")
        elif "Administrators" in groups:
            found.append(f"{where}: runs as '{user_ref}', a member of Administrators; use a LocalUser outside it")

    # Every code package not named in a RunAsPolicy runs under DefaultRunAsPolicy, and without one as
    # Fabric runs: so the default must exist, and every policy name an account that cannot read the key.
    if default is None:
        found.append("no DefaultRunAsPolicy: a code package without its own RunAsPolicy runs as Fabric does "
                     "(NETWORK SERVICE), which can read the cluster certificate's key")
    else:
        refused(default.get("UserRef"), "DefaultRunAsPolicy")
    imports = manifest.findall("sf:ServiceManifestImport", NS)
    for imported in imports:
        name = imported.find("sf:ServiceManifestRef", NS)
        package = name.get("ServiceManifestName") if name is not None else "?"
        for policy in imported.findall("sf:Policies/sf:RunAsPolicy", NS):
            refused(policy.get("UserRef"), f"{package}/{policy.get('CodePackageRef')}")
    if not imports:
        found.append("no ServiceManifestImport")
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: check_application_manifest.py PATH/ApplicationManifest.xml", file=sys.stderr)
        return 2
    path = Path(args[0])
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        print(f"{path}: not a readable XML file: {error}", file=sys.stderr)
        return 2
    if root.tag != f"{{{NS['sf']}}}ApplicationManifest":
        print(f"{path}: not a Service Fabric ApplicationManifest (root element {root.tag})", file=sys.stderr)
        return 2
    found = problems(root)
    for line in found:
        print(f"{path}: {line}", file=sys.stderr)
    if not found:
        print(f"{path}: every code package runs as a principal that cannot read the cluster certificate's key")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
