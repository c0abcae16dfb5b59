"""Which field names say that their value is secret.

A name (a JSON key, an env/ini/YAML key, a ``--flag``, an XML tag, an HTTP
header) is split into lowercase word parts on ``_ - . :``, spaces, digits and
camelCase (``dbPassword`` -> ``db password``, ``APIKey`` -> ``api key``). It is
secret when

- a part is a secret word (``password``, ``passwd``, ``passphrase``, ``secret``,
  ``token``, ``credentials``, ``authorization``, ``apikey``, the LDAP directives
  ``bindpw``, ``rootpw`` and ``rootbindpw``, slapd's debconf question ``adminpw`` ...), or
- the LAST part is ``pass``, ``pw``, ``pwd``, ``auth``, ``cookie``, ``jwt``, ``authtok`` or ``psk``
  (``db_pass``, ``mysql_pwd``, ``basic_auth``, ``Set-Cookie``, sssd's
  ``ldap_default_authtok``, a Wi-Fi key's ``wpa_psk``; not ``ldap_default_authtok_type`` or
  ``psk_identity``) or ends with
  ``password passwd passphrase secret token`` (``PGPASSWORD``,
  ``clientsecret``, ``authtoken``), or
- two adjacent parts are ``<qualifier> key`` for a qualifier in
  `KEY_QUALIFIERS` (``api_key``, ``AccessKey``, ``x-api-key``, ``private_key``,
  ``AccountKey``, ``session_key``, wpa_supplicant's ``wep_key0``),

unless its LAST part describes the secret instead of holding it
(`DESCRIPTOR_WORDS`: ``password_policy``, ``token_count``, ``private_key_path``,
``auth_method``, ``secret_name``, NetworkManager's ``psk-flags``) or it is the shell's
``PWD``/``OLDPWD``. A few
environment variables whose one word the rules above cannot read are named
outright (`SECRET_ENV_NAMES`: sshpass's ``SSHPASS``, the Azure CLI's ``AZURE_STORAGE_KEY``),
and so are a few LDAP attributes holding keys or hashes (`SECRET_ATTRIBUTE_NAMES`:
``krbPrincipalKey``, ``krbMKey``; ``krbPrincipalName`` stays).
A bare ``key`` is never secret (``Key_reads``, ``primary_key``,
``keyspace_hits``, ``evicted_keys``), and parts are whole words, so
``monkey``, ``author``, ``authority``, ``passed_tests``, ``tokenizer_version``,
``bypass``, ``max_tokens``, ``libsecret-common`` and ``gcloud-auth-plugin``
are ordinary names.
"""

from __future__ import annotations

import functools
import re

# A part equal to one of these makes a name secret, wherever it is (adminpw: slapd's debconf
# question slapd/internal/adminpw, which debconf's passwords.dat holds).
SECRET_WORDS = frozenset(
    {
        "password", "passwords", "passwd", "passphrase", "secret", "secrets", "token",
        "credential", "credentials", "creds", "authorization", "apikey", "accesskey",
        "privatekey", "secretkey", "authkey", "sessionkey", "clientsecret", "requirepass",
        "masterauth", "storepass", "keypass", "srcstorepass", "deststorepass", "srckeypass",
        "destkeypass", "sessionid", "phpsessid", "jsessionid", "bindpw", "rootpw", "rootpwmodpw",
        "rootbindpw", "adminpw",
    }
)  # fmt: skip
# Secret only as the LAST part: db_pass, SMTP_PASS, mysql_pwd, basic_auth, session_cookie, sssd's
# ldap_default_authtok, wpa_psk; elsewhere they are too common (pass_rate, gcloud-auth-plugin,
# cookie_domain, jwt_issuer, psk_identity).
SECRET_LAST_WORDS = frozenset({"pass", "pw", "pwd", "auth", "cookie", "cookies", "jwt", "authtok", "psk"})
# A LAST part ending with one of these is secret too: PGPASSWORD, dbpassword, clientsecret, authtoken.
SECRET_SUFFIXES = ("password", "passwd", "passphrase", "secret", "token")
# "<qualifier> key" is secret: api_key, AccessKey, x-api-key, private_key, AccountKey.
KEY_QUALIFIERS = frozenset(
    {
        "api", "access", "private", "secret", "auth", "account", "session", "encryption",
        "signing", "master", "client", "shared", "hmac", "wep",
    }
)  # fmt: skip
# A last part that says the value describes a secret instead of holding it.
DESCRIPTOR_WORDS = frozenset(
    {
        "count", "counts", "total", "num", "number", "len", "length", "size", "bytes", "type",
        "kind", "method", "mode", "policy", "file", "path", "dir", "name", "names", "enabled",
        "disabled", "required", "set", "expired", "expires", "expiry", "expiration", "ttl", "age",
        "ref", "hits", "misses", "used", "version", "min", "max", "limit", "rate", "at", "time",
        "timeout", "algorithm", "format", "url", "uri", "endpoint", "host", "port", "user",
        "username", "stdin", "env", "command", "cmd", "helper", "provider", "source", "scope",
        "changed", "lifetime", "history", "strength", "prompt", "server", "servers", "service",
        "domain", "realm", "header", "hint", "label", "encryption", "flags",
    }
)  # fmt: skip
# The shell's working-directory variables (case-sensitive), not passwords.
NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
# Variables holding a password under one word the rules cannot split (case-sensitive: the
# package "sshpass:amd64" in dpkg's log is no secret): sshpass -e reads SSHPASS. MYSQL_PWD,
# PGPASSWORD and REDISCLI_AUTH are secret by the rules already. (etcdctl's ETCDCTL_USER holds
# user:PW: its password half is hidden by scrub_programs' program_password_flag, the user kept.)
# The Azure CLI reads a storage account's key from AZURE_STORAGE_KEY ("storage key" is no
# qualified key everywhere: a storage_key may name one).
SECRET_ENV_NAMES = frozenset({"SSHPASS", "AZURE_STORAGE_KEY"})
# LDAP attributes holding keys or password hashes, whole names in any case (as LDAP reads them): the
# rules above cannot read them without calling "principal key" or "... history" secret everywhere
# (password_history counts the passwords kept). MIT Kerberos' krbPrincipalKey (a principal's keys),
# krbMKey (the realm's master key) and krbPwdHistory (old keys), Heimdal's krb5Key, Samba's
# sambaPasswordHistory (salted hashes of old NT hashes), OpenLDAP ppolicy's pwdHistory (old
# userPassword hashes) and inetOrgPerson's userPKCS12 (a private key with its certificates).
SECRET_ATTRIBUTE_NAMES = frozenset(
    {
        "krbprincipalkey",
        "krbmkey",
        "krbpwdhistory",
        "krb5key",
        "sambapasswordhistory",
        "pwdhistory",
        "userpkcs12",
    }
)

_WORD_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def name_parts(name: str) -> list[str]:
    """``name`` split into lowercase word parts: ``"dbPassword_v2"`` -> ``["db", "password", "v", "2"]``."""
    return [part.lower() for part in _WORD_PARTS.findall(name)]


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """True when a field called ``name`` holds a secret (see the module docstring)."""
    if name in NOT_SECRET_NAMES:
        return False
    if name in SECRET_ENV_NAMES or name.lower() in SECRET_ATTRIBUTE_NAMES:
        return True
    parts = name_parts(name)
    if not parts or parts[-1] in DESCRIPTOR_WORDS:
        return False
    if parts[-1] in SECRET_LAST_WORDS or parts[-1].endswith(SECRET_SUFFIXES):
        return True
    for index, part in enumerate(parts):
        if part in SECRET_WORDS:
            return True
        if part in ("key", "keys") and index > 0 and parts[index - 1] in KEY_QUALIFIERS:
            return True
    return False
