"""A state URL is logged without its password, wherever the URL holds it (libpq takes it in the user part or as
a ``password`` parameter)."""

from tinytitan.store.db import redact


def test_the_password_in_the_user_part_is_hidden():
    assert redact("postgresql://tt:s3cret@db.local:5433/tt") == "postgresql://tt:***@db.local:5433/tt"


def test_the_password_as_a_parameter_is_hidden():
    url = "postgresql://tt@db.local/tt?sslmode=require&password=s3cret&application_name=x"
    assert redact(url) == "postgresql://tt@db.local/tt?sslmode=require&password=***&application_name=x"
    assert "s3cret" not in redact("postgresql://db.local/tt?PASSWORD=s3cret")


def test_a_url_without_a_password_is_unchanged():
    for url in ("postgresql://tt@db.local/tt", "postgresql:///tt?host=/var/run/postgresql", "sqlite.db"):
        assert redact(url) == url
