"""A driver release pin (`driver.branch: "580.82.07"`): the apt preferences that hold every NVIDIA package at
it, the Debian version chosen from what the host's apt sources offer, and the refusal of one they lack."""

from __future__ import annotations

import re

import pytest

from vllmctl.ops import OpError
from vllmctl.ops.driver import is_release_pin, pin_preferences, pinned_version

OFFERED = {"apt_versions": {"nvidia-driver-580": ["580.95.05-1", "1:580.82.07-0ubuntu1", "580.82.07-1"]}}


def _pattern(prefs: str) -> re.Pattern[str]:
    (line,) = [line for line in prefs.splitlines() if line.startswith("Pin: version ")]
    return re.compile(line.removeprefix("Pin: version ").strip("/"))


def test_a_release_pin_matches_that_release_with_or_without_an_epoch_and_nothing_else() -> None:
    prefs = pin_preferences("580.82.07")
    assert "Package: *nvidia*" in prefs and "Pin-Priority: 1001" in prefs  # above 1000: apt may downgrade
    pattern = _pattern(prefs)
    for version in ("580.82.07-1", "1:580.82.07-0ubuntu1", "580.82.07-0ubuntu0.24.04.2"):
        assert pattern.match(version), version
    for version in ("580.95.05-1", "580.82.071-1", "1580.82.07-1", "580.82.0-1"):
        assert not pattern.match(version), version


def test_a_minor_pin_matches_every_patch_of_that_minor() -> None:
    pattern = _pattern(pin_preferences("580.82"))
    assert pattern.match("580.82.07-1") and pattern.match("2:580.82.10-1")
    assert not pattern.match("580.95.05-1") and not pattern.match("580.821.1-1")


def test_only_dotted_pins_are_release_pins() -> None:
    assert is_release_pin("580.95.05") and is_release_pin("580.95") and not is_release_pin("580")


def test_the_newest_offered_debian_version_of_the_release_is_installed() -> None:
    assert pinned_version("nvidia-driver-580", "580.82.07", OFFERED) == "1:580.82.07-0ubuntu1"


def test_lists_that_do_not_know_the_package_leave_the_version_to_apt_after_its_update() -> None:
    assert pinned_version("nvidia-driver-580", "580.82.07", {"apt_versions": {}}) == "580.82.07-*"
    assert pinned_version("nvidia-driver-580", "580.82", {"apt_versions": {}}) == "580.82.*"


def test_a_release_the_sources_do_not_offer_is_refused_naming_what_they_do() -> None:
    with pytest.raises(OpError) as caught:
        pinned_version("nvidia-driver-580", "580.65.06", OFFERED)
    assert "580.65.06" in caught.value.message and "has 580.95.05, 580.82.07\n" in caught.value.message + "\n"
