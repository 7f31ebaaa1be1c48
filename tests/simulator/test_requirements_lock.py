"""The fleet hosts install simulator/requirements.lock with pip install --require-hashes --no-deps
(stacks/documents/install_simulator.sh): with --no-deps pip installs exactly what the lock lists,
so a dependency missing from it would be missing on every host, and with --require-hashes every
line needs its hashes. Completeness is checked against the dependency metadata of the very
versions locked (installed in this virtual environment from constraints.txt), with the markers
evaluated as on a fleet host (Amazon Linux 2023, python3.11, x86_64)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "simulator" / "requirements.lock"
REQUIREMENTS = REPO / "simulator" / "requirements.txt"
INSTALL_SCRIPT = REPO / "stacks" / "documents" / "install_simulator.sh"

FLEET_ENVIRONMENT = {
    **default_environment(),
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]+)")


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes), from the lock's logical lines."""
    text = LOCK.read_text(encoding="utf-8")
    logical = re.sub(r"\\\n", " ", text).splitlines()
    result = {}
    for line in logical:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        assert match, f"not an exact pin: {line!r}"
        result[canonicalize_name(match.group(1))] = (match.group(2), HASH.findall(line))
    return result


def top_level() -> list[Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines()]
    return [Requirement(line) for line in lines if line]


def test_every_locked_package_is_pinned_with_sha256_hashes():
    lock = locked()
    assert lock
    for name, (version, hashes) in lock.items():
        assert hashes, f"{name}=={version} has no --hash"
        assert all(len(h) == 64 for h in hashes), f"{name}: a hash is not a SHA-256"


def test_the_lock_pins_what_requirements_txt_asks_for():
    lock = locked()
    for requirement in top_level():
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{requirement} is not in requirements.lock; run make simulator-lock"
        assert requirement.specifier.contains(lock[name][0], prereleases=True), (
            f"requirements.txt asks for {requirement}, the lock has {lock[name][0]}; run make simulator-lock"
        )


def test_the_lock_holds_every_dependency_of_what_it_installs():
    lock = locked()
    wanted = {canonicalize_name(r.name): set(r.extras) for r in top_level()}
    seen: set[tuple[str, frozenset[str]]] = set()
    queue = list(wanted.items())
    while queue:
        name, extras = queue.pop()
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        assert name in lock, f"{name} is needed on a fleet host but missing from requirements.lock"
        installed = metadata.version(name)
        assert installed == lock[name][0], (
            f"{name}: the lock has {lock[name][0]}, constraints.txt installs {installed}; run make simulator-lock"
        )
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            applies = requirement.marker is None or any(
                requirement.marker.evaluate({**FLEET_ENVIRONMENT, "extra": extra}) for extra in (extras or {""})
            )
            if not applies:
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in lock, f"{name} needs {requirement}, which requirements.lock lacks"
            assert requirement.specifier.contains(lock[dependency][0], prereleases=True), (
                f"{name} needs {requirement}, the lock has {lock[dependency][0]}"
            )
            queue.append((dependency, set(requirement.extras)))


def test_fleet_hosts_install_only_the_hash_locked_file():
    script = INSTALL_SCRIPT.read_text(encoding="utf-8")
    (install,) = [line for line in script.splitlines() if "pip\" install" in line]
    assert "--require-hashes" in install and "--no-deps" in install
    assert install.rstrip().endswith('-r "$home/simulator/requirements.lock"')
    assert "requirements.txt" not in script
