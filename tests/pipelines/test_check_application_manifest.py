"""The pipeline's check that no code package runs as an account that can read the cluster
certificate's key (pipelines/check_application_manifest.py), run as the Build stage runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

CHECK = REPO / "pipelines" / "check_application_manifest.py"


def manifest(users: str, policies: str = "", imports: str = "") -> str:
    return f"""<?xml version="1.0" encoding="utf-8"?>
<ApplicationManifest ApplicationTypeName="TelemetryApplicationType" ApplicationTypeVersion="1.0.0"
    xmlns="http://schemas.microsoft.com/2011/01/fabric" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <ServiceManifestImport>
    <ServiceManifestRef ServiceManifestName="IngestPkg" ServiceManifestVersion="1.0.0" />
    {imports}
  </ServiceManifestImport>
  <Principals><Users>{users}</Users></Principals>
  <Policies>{policies}</Policies>
</ApplicationManifest>"""


def run(tmp_path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "ApplicationManifest.xml"
    path.write_text(text)
    return subprocess.run([sys.executable, str(CHECK), str(path)], capture_output=True, text=True, check=False)


APP_USER = '<User Name="TelemetryApp" AccountType="LocalUser" />'
DEFAULT = '<DefaultRunAsPolicy UserRef="TelemetryApp" />'


def test_a_low_privilege_default_and_policies_pass(tmp_path):
    done = run(tmp_path, manifest(APP_USER + '<User Name="Setup" />', DEFAULT,
                                  '<Policies><RunAsPolicy CodePackageRef="Code" UserRef="Setup" EntryPointType="Setup" /></Policies>'))
    assert done.returncode == 0, done.stderr
    assert "cannot read the cluster certificate's key" in done.stdout


@pytest.mark.parametrize(("users", "policies", "imports", "says"), [
    (APP_USER, "", "", "no DefaultRunAsPolicy"),
    ('<User Name="Svc" AccountType="NetworkService" />', '<DefaultRunAsPolicy UserRef="Svc" />', "", "runs as NetworkService"),
    (APP_USER, DEFAULT, '<Policies><RunAsPolicy CodePackageRef="Code" UserRef="Sys" /></Policies>',
     "'Sys', which is not a user"),
    (APP_USER + '<User Name="Sys" AccountType="LocalSystem" />', DEFAULT,
     '<Policies><RunAsPolicy CodePackageRef="Code" UserRef="Sys" /></Policies>', "IngestPkg/Code: runs as LocalSystem"),
    ('<User Name="Admin"><MemberOf><SystemGroup Name="Administrators" /></MemberOf></User>',
     '<DefaultRunAsPolicy UserRef="Admin" />', "", "a member of Administrators"),
    # Microsoft's own RunAs example: an administrators group of the manifest, the user in it.
    ('</Users><Groups><Group Name="LocalAdminGroup"><Membership><SystemGroup Name="Administrators" />'
     '</Membership></Group></Groups><Users><User Name="App"><MemberOf><Group NameRef="LocalAdminGroup" />'
     '</MemberOf></User>', '<DefaultRunAsPolicy UserRef="App" />', "", "a member of Administrators"),
    ('<User Name="Svc" AccountType="DomainUser" AccountName="corp\\svc" />', '<DefaultRunAsPolicy UserRef="Svc" />', "",
     "runs as a DomainUser account"),
], ids=["no default", "network service", "unknown user", "local system", "administrators", "administrators by group",
        "domain user"])
def test_an_account_that_can_read_the_key_is_refused_in_one_line(tmp_path, users, policies, imports, says):
    done = run(tmp_path, manifest(users, policies, imports))
    assert done.returncode == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_file_that_is_not_an_application_manifest_exits_2(tmp_path):
    assert run(tmp_path, "<ServiceManifest />").returncode == 2
    assert run(tmp_path, "not xml").returncode == 2
