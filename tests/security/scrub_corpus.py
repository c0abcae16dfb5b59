"""The scrubber corpus: secret shapes that must disappear, look-alikes that must survive.

Each `SecretCase` is a realistic string with a secret embedded in ordinary
text; ``secret`` is the exact substring that must be gone after scrubbing, and
``expected`` (when given) the exact scrubbed text. Each `LookAlike` must come
out byte-identical with zero redactions; ``why`` says what it resembles. Each
`ArgvLookAlike` is a list of strings (a process's argv) that must survive the same
way; the argv secrets, with their exact scrubbed form, are in
``test_scrubber.test_argv_lists``.

Every credential here is fake. Vendor tokens are assembled from pieces
(``"sk_" + "live_" + ...``) so that secret scanners do not flag this file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class SecretCase:
    name: str
    text: str
    secret: str
    expected: str | None = None
    redactions: int = 1


@dataclass(frozen=True)
class LookAlike:
    name: str
    text: str
    why: str


@dataclass(frozen=True)
class ArgvLookAlike:
    name: str
    argv: tuple[str, ...]
    why: str


RSA_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
PKCS8_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
EC_BODY = "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oYbTB+3bg1qRoAoGCCqGSM49"
OPENSSH_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
PGP_BODY = "lQOYBGWmUq4BCADJ2nVj4q3Yf2W3x8LQbXg0mY6mZ7kPp1Zrj8mJ6r9qY1Hq"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkphbmUiLCJpYXQiOjE1MTYyMzkwMjJ9"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
GITHUB_PAT = "gh" + "p_" + "R7cK2mYq9WvX4tZ8bN1sL6dF3hJ0pQ5uE2aC"
SONDE_API_KEY = "sonde" + "_" + "Fq3-Zr8_kP0vW2mX7nB4cY9tL1sD6hJ5gQ0aE8uR3iO"  # secrets.token_urlsafe(32)
SONDE_ENROLL = "enr" + "_" + "zieIzfyxOxHahd4DDVSBdHnB-nRMRUKv"  # secrets.token_urlsafe(24)
GITHUB_FINE = "github" + "_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF0123456789"
GITHUB_OAUTH = "gh" + "o_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GITLAB = "gl" + "pat-" + "xR4nD0mT0k3nV4lu3zQ1"
SLACK_BOT = "xo" + "xb-" + "2401234567890-2409876543210-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
SLACK_USER = "xo" + "xp-" + "2401234567890-2401234567891-2409876543211-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
STRIPE = "sk" + "_live_" + "51HxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123"
STRIPE_RESTRICTED = "rk" + "_test_" + "4eC39HqLyjWDarjtT1zdp7dc"
OPENAI = "sk-" + "proj-" + "Xy7aB3cD9eF1gH5iJ2kL8mN4oP6qR0sT-uVwXyZ_12"
ANTHROPIC = "sk-" + "ant-api03-" + "Q2x9vB7nM4kL1pO8iU6yT3rE5wQ0aS2dF4gH6jK8lZ"
NPM = "np" + "m_" + "aBcD3fGh1jKlMn0pQrStUvWxYz0123456789"
PYPI = "py" + "pi-" + "AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTkwYWItY2RlZi0xMjM0LTU2Nzg5MGFiY2RlZgACKlszLCJ0ZXN0Il0"
HUGGING_FACE = "h" + "f_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
VAULT = "hv" + "s." + "CAESIJ4xW9kq7wQ8mZ3rT1yU5oP2sD6fG0hJ"
SENDGRID = "S" + "G." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr"
DIGITALOCEAN = "do" + "p_v1_" + "b7d03a6947b217efb6f3ec3bd3504582b7d03a6947b217efb6f3ec3bd3504582"
DOCKER_HUB = "dck" + "r_pat_" + "2b3e36beeb386dfdaacb9b46004ccb7c"
GOOGLE_API = "AI" + "za" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
GOOGLE_OAUTH = "ya" + "29." + "a0AfH6SMBx3kP9qZ2vL7wN4rT1yU8oI5eW0sD"
OPENVPN_HEX = "\n".join(
    [
        "5feceb66ffc86f38d952786c6d696c79",
        "6b86b273ff34fce19d6b804eff5a3f57",
        "d4735e3a265e16eee03f59718b9b5d03",
        "4e07408562bedb8b60ce05c1decfe3ad",
    ]
    * 4
)
TLS_CRYPT_V2_BODY = "pKvURIxJVi2CgRXROh/M6pJ/UrTVRZKX+LQ+QtqJI4vBNibkPcs43bCCSIkn7JBP"
SSH2_BODY = "P2/56wAAAi4AAAA3aWYtbW9kbntzaWdue3JzYS1wa2NzMS1zaGExfSxlbmNyeXB0e3JzYS"
AGE_KEY = "AGE-SECRET-" + "KEY-1" + "GYS8LU7CDXLPCMQU3WX5PPPQCDMPWULWKWWAJP6XTJ84MVNJLEZ70E6THH"
TELEGRAM_SECRET = "AA" + "HdqTcvCH1vGWJxfSeofSAs0K5PALDsawq"
TELEGRAM_SECRET_2 = "AA" + "L4NUyv_D8FnyVVdBZdzst6iAxQa2H9uZ0"
DISCORD_TOKEN = "_t1sAq6DdWXLgEJKC5Bjf" + "iOXslIVUgVil6p-8ODnxr1YhNga3CcCySEU52c5cDyp2HmQ"
GOSSIP_KEY = "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s="
SHA512_CRYPT = "rounds=5000$saltsalt$Jb0ZlOqY8hE0t0pbjd8.nPIjqA3mGAn1g8GTdYMb7e4d3q8K8C8nXq7pDGx9C9PSdaYPxMvcP3Q6ZXqcBuD1d/"
YESCRYPT = "j9T$F5Jx5fExrKuJdx0pxV8gq1$D2oDyzVBcBq6c2Z5Ba7lvjHTPjIVAybqI5dBgQdsF89"
BCRYPT = "05$c4WoMPo3SXsafkva.HHa6uXQZWr7oboPiC2bT/r7q1BB8I2s0BRqC"
# Private keys printed as numbers: `openssl rsa -in k.pem -text -noout` of a throwaway 512-bit key
# made for this corpus (the public modulus stays, each private number goes), `openssl pkey -text`
# of P-256 and Ed25519 keys, and FreeS/WAN's (libreswan's) inline RSA key in ipsec.secrets.
RSA_TEXT_PUBLIC = (
    "Private-Key: (512 bit, 2 primes)\nmodulus:\n"
    "    00:bf:65:46:1c:c7:d3:38:0e:f2:3c:96:8a:fc:cf:\n"
    "    bf:93:c6:e8:e4:b6:3c:50:53:42:73:95:83:ab:6e:\n"
    "    6a:11:65:cb:a4:5e:6e:d7:fd:e8:8c:f7:72:21:ea:\n"
    "    43:b8:d1:64:38:12:31:26:3b:e7:37:88:0c:34:7c:\n"
    "    c4:9d:3f:b1:01\npublicExponent: 65537 (0x10001)\n"
)
RSA_TEXT_PRIVATE = (
    ("privateExponent", "33:46:d8:af:e1:41:4f:65:81:b4:85:c8:9a:ce:b5:\n    ce:cb:9d:9d:98:cd:33:df:fa:8f:a8:e0:eb:ce:db:\n"
     "    0f:e9:b4:51:c1:71:d8:1a:4e:30:af:ce:2f:5e:b5:\n    47:87:22:f4:b5:4a:63:d9:c7:7f:04:11:18:a0:77:\n    00:34:84:59"),
    ("prime1", "00:fa:54:f8:12:5f:5c:8a:f0:ea:0a:36:48:d1:55:\n    e7:88:d9:a5:95:81:2f:24:2e:d9:05:3e:09:86:07:\n    07:d3:cf"),
    ("prime2", "00:c3:ba:af:4c:25:de:e3:d9:9c:38:a9:cd:69:50:\n    63:f9:59:1d:0a:c9:b3:be:8f:8e:af:c3:40:30:9b:\n    f0:d2:2f"),
    ("exponent1", "00:bd:e7:79:ad:ce:64:11:0f:44:2c:ed:13:7e:a2:\n    f1:9b:b2:a8:d7:eb:01:8d:2c:70:fc:76:1c:99:6d:\n    79:f5:a7"),
    ("exponent2", "6d:b2:21:30:f2:40:9b:3e:88:b9:91:21:18:96:ff:\n    90:ee:0a:c2:d3:0c:b4:0e:4d:0f:e0:c4:06:fa:3e:\n    db:ed"),
    ("coefficient", "00:e9:4e:80:ed:29:67:19:4f:9a:07:cd:f7:70:5c:\n    7c:83:a8:28:aa:70:cf:5c:20:52:5a:a4:21:a5:f2:\n    27:d2:20"),
)  # fmt: skip
RSA_TEXT = RSA_TEXT_PUBLIC + "".join(f"{label}:\n    {value}\n" for label, value in RSA_TEXT_PRIVATE)
RSA_TEXT_HIDDEN = RSA_TEXT_PUBLIC + "".join(f"{label}:\n    [REDACTED]\n" for label, _ in RSA_TEXT_PRIVATE)
EC_TEXT_PUBLIC = (
    "pub:\n    04:4e:4a:de:7b:22:d7:e2:3a:e0:01:d2:b5:52:0d:\n    de:ef:9b:c7:d9:4f:14:0b:1c:3e:2a:b0:e3:c1:ea:\n"
    "    31:cd:27:d8:0b:11:6c:66:3a:44:65:f2:6e:f5:5d:\n    27:41:fe:fd:a3:ec:c3:e6:fa:e1:f7:cd:79:c9:7e:\n"
    "    f7:a4:b1:a4:4f\nASN1 OID: prime256v1\nNIST CURVE: P-256\n"
)
EC_TEXT_PRIVATE = "21:41:34:45:07:73:76:a1:58:78:07:48:e1:ef:87:\n    54:13:92:56:49:21:34:9e:b5:44:93:f4:70:92:3b:\n    3c:a6"
LIBRESWAN_RSA_PUBLIC = (
    ": RSA\t{\n\t# RSA 2048 bits   moon.example.com   Thu Jan  4 12:00:00 2024\n"
    "\t# for signatures only, UNSAFE FOR ENCRYPTION\n\t#pubkey=0sAQOmD3c3cXNlcmtleWZvcnRlc3Rpbmdvbmx5\n"
    "\tModulus: 0xa60f7737371735e6ad1b2e7d64f3a3\n\tPublicExponent: 0x03\n"
    "\t# everything after this point is secret\n"
)
LIBRESWAN_RSA_PRIVATE = (
    ("PrivateExponent", "0x6eb4f7a4cf64c3a2f1d9e8b7a6c5d4e3"),
    ("Prime1", "0xd9c8b7a6f5e4d3c2b1a0"),
    ("Prime2", "0xc3b2a1f0e9d8c7b6a5f4"),
    ("Exponent1", "0s5oXPGaTtMtHQ"),
    ("Exponent2", "0x82776b4f9be5da79c3f8"),
    ("Coefficient", "0x1a2b3c4d5e6f7a8b9c0d"),
)  # fmt: skip


# Private keys printed by `openssl asn1parse` (OpenSSL 3.0), of throwaway keys and a certificate
# made for this corpus: the private values go (told from the structure: a key's version INTEGER
# then its numbers; PKCS#8's OCTET STRING after the algorithm; SEC 1's after version 1), the
# public ones and a certificate's elements stay.
def _asn1(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def _asn1_hiding(text: str, *indexes: int) -> str:
    """``text`` (asn1parse's lines) with the value of each line of ``indexes`` (from 0) hidden."""
    lines = text.split("\n")
    for index in indexes:
        head, colon, _ = lines[index].rpartition(":")
        lines[index] = head + colon + "[REDACTED]"
    return "\n".join(lines)


def _asn1_value(text: str, index: int) -> str:
    """The value on line ``index`` (from 0) of ``text`` (asn1parse's lines)."""
    return text.split("\n")[index].rpartition(":")[2]


# `openssl genrsa -traditional 512 | openssl asn1parse`
ASN1_RSA_TRADITIONAL = _asn1(
    "    0:d=0  hl=4 l= 314 cons: SEQUENCE          ",
    "    4:d=1  hl=2 l=   1 prim: INTEGER           :00",
    "    7:d=1  hl=2 l=  65 prim: INTEGER           :AFA7A875CF63F1512AA12D0114408636A64F090200DD8FECAEABA9E8CB03363E7B3E5215B21C77601600AA6AD551E19F229A860EBE2277B0972293177128B569",
    "   74:d=1  hl=2 l=   3 prim: INTEGER           :010001",
    "   79:d=1  hl=2 l=  65 prim: INTEGER           :99C3410347F56BF42A4606D84FFB1FC1CD1998800973EA1E3CD5069A42C4600124432149DB5E9F7F3742B9D7BB9BE5695F199BCB86547A162D2031408005C6B5",
    "  146:d=1  hl=2 l=  33 prim: INTEGER           :DE4DF3D0203CD9B8EBD67F913EF3FE49AA4101D54E75668EEFF51A76CDEE7EFF",
    "  181:d=1  hl=2 l=  33 prim: INTEGER           :CA47919FDA7940165CE36E0E22458E06AF6A4030E07D0BBAA7007F8038D13397",
    "  216:d=1  hl=2 l=  32 prim: INTEGER           :02BDA34BE599DA75553307CF9A9F177B8105DC27ED17B573FDB15FEA270FD1B1",
    "  250:d=1  hl=2 l=  32 prim: INTEGER           :5626751727ED4C263A1982DDF22ABD7A8B6B2D3BA3E09E0638EA35635ECF7AB1",
    "  284:d=1  hl=2 l=  32 prim: INTEGER           :6080B2054A3CC8119A5B965391B6E1A01EF2E00B67E0D04067BD83C1AC576ABF",
)
# a 1024-bit key of 3 primes (`genpkey -pkeyopt rsa_keygen_primes:3`, traditional)
ASN1_RSA_THREE_PRIMES = _asn1(
    "    0:d=0  hl=4 l= 637 cons: SEQUENCE          ",
    "    4:d=1  hl=2 l=   1 prim: INTEGER           :01",
    "    7:d=1  hl=3 l= 129 prim: INTEGER           :A6B9D4E78CE06587BA2C573AE53267358F21FBD5B1EA218A766FA03085B151097CA9B3F87556DDA63DA76A43FC5BF61EB7A28B9EAE9E631B81CDC26FD7B35CBB51E911452C530035DC5F9D2EBA17FB9D652E2F2B1002EB1EBF59F71742899F5B92002BF57CB89F566BA685F4C1757648E6A31A1DDDAC2316DD7DCB7144B9D139",
    "  139:d=1  hl=2 l=   3 prim: INTEGER           :010001",
    "  144:d=1  hl=3 l= 128 prim: INTEGER           :5728ED1183C747ACB5FA3A3BF2D7EFB6C335FBE6925518E5BED6CA42B391A810B298311AA19520D8A88095F78ADA7A08C5C32720AE32C372E23853E693E881888014CEE8BBF6240804EE603E75CC571F4F3BB82A2828D0FBB40A52E1EBACD81B991670BA2FB20DED72A94DED678390CE8A1F8C2E924AC9E1BC6EE90F30671A31",
    "  275:d=1  hl=2 l=  43 prim: INTEGER           :3D038D8FB4AD1F29DAF01A7B85DA1A2975B775F9C4A8739A86077CD6AC8C9423B629C2E805F5AE6931B94B",
    "  320:d=1  hl=2 l=  43 prim: INTEGER           :1C3D90D0F482CC169C3DCDBF947A0BBBF7B6E18FAA2885360622BF7232A85A2430D131E7A6B22683567415",
    "  365:d=1  hl=2 l=  43 prim: INTEGER           :02612D1839B7B6CB6F1A862DE31E8A7EAB74A849417E4063FA6E3854370E9488800648EFBBABC54D9CFED9",
    "  410:d=1  hl=2 l=  43 prim: INTEGER           :049FA7D82E5043EDE7C2CEAEF136523982433506FA8B0BD45E88CDE37A9BC9B6672FB905FE6AE897544E49",
    "  455:d=1  hl=2 l=  43 prim: INTEGER           :17723C6842CF89289CA6423B35C4D8A2CE1B86D31070E863A77C06491691518652990717494BAAB4C1E043",
    "  500:d=1  hl=3 l= 138 cons: SEQUENCE          ",
    "  503:d=2  hl=3 l= 135 cons: SEQUENCE          ",
    "  506:d=3  hl=2 l=  43 prim: INTEGER           :18C55B23E2609414B54ACCD11945A345221DE3AFF6D7B5D8664164B6122EC65B82C581E9C341AD36B8389F",
    "  551:d=3  hl=2 l=  43 prim: INTEGER           :10131A76E9F3E4849FB53FBEBD98AC4033C893B5E008D1AFF183A438670A459CA2FB4AB80906B8C216C05F",
    "  596:d=3  hl=2 l=  43 prim: INTEGER           :084AA4FB1D0CFA9834D1CF02E0630B0218B664F3A564B5FC14A2A45EC750001C83D24E8A40C916D56C3BC6",
)
# a DSA key, traditional
ASN1_DSA_TRADITIONAL = _asn1(
    "    0:d=0  hl=4 l= 460 cons: SEQUENCE          ",
    "    4:d=1  hl=2 l=   1 prim: INTEGER           :00",
    "    7:d=1  hl=3 l= 129 prim: INTEGER           :FA74585FFCE86365ADB9A8FA91723B54253699BA2DF2E9C77B89DCD9FE24E39773D4E4CE6425858A2A2145C15291A354F6A9E3D265EACA9DB51426E14698DA0CFE8028C444D061FECB9B9761BB7C0CA9C26AEC5671D4E34B07D9AD75CD7BCFC8D168CE009B4C3DAB8B8006F76D34629272F1E56BE4973CAB4CF09A24EE986FA9",
    "  139:d=1  hl=2 l=  29 prim: INTEGER           :D1F1A4A771F3B534D9018BC5F7D78CC09B9EC7DB4CFE6B63BC819EC5",
    "  170:d=1  hl=3 l= 129 prim: INTEGER           :E95958B5885B69D41A090F53443F04F915EBF77F2A2F3FB736041D8B5420C2243BCC99EA7B5528EE47B7E42E665C1F3AD0C32CE0A33FAD9C0E7DFFD46A914CB205B6BD969863F301ACD7A9E20F89642217B7A9EFD0B61BA47509F07D616C122D3BF64B64604341B27127750B1A6100E6B436B26405A4399BB6F8F5FEF391E744",
    "  302:d=1  hl=3 l= 129 prim: INTEGER           :B21813E6478E88491497728ED032366001948F3F8309E0A2E6CD958264B94BDCFB8D0DAF7712981590A48B8D7E39490474EBB0A152E1744F49C33551ADA96229D128F74B53442D3F65D57CDD0EA985F217920C80F575CC6956F28346AD043F369CA8063A16FE209E824B69BA2A88B8415087F466677E41F1F6A14E474EE02EB7",
    "  434:d=1  hl=2 l=  28 prim: INTEGER           :5951484EC26CDFB337B45D9813EC5E9A0D5722DF776553D33A8E4199",
)
# `genpkey -algorithm EC` (P-256), PKCS#8
ASN1_EC_PKCS8 = _asn1(
    "    0:d=0  hl=3 l= 135 cons: SEQUENCE          ",
    "    3:d=1  hl=2 l=   1 prim: INTEGER           :00",
    "    6:d=1  hl=2 l=  19 cons: SEQUENCE          ",
    "    8:d=2  hl=2 l=   7 prim: OBJECT            :id-ecPublicKey",
    "   17:d=2  hl=2 l=   8 prim: OBJECT            :prime256v1",
    "   27:d=1  hl=2 l= 109 prim: OCTET STRING      [HEX DUMP]:306B0201010420E497F516EF44E70AF8620F498592428FF2546BE43327B3719949F6AA238353CBA14403420004C11F74142E9C31A939FFD80D46B3541066EA3A9C4BBFB52B853357DD92F67A60B0E5AF83C68F1FF665B55C36E5088D826762DE0DE15CFB04657C95B9F15E640B",
)
# `genpkey -algorithm X25519`
ASN1_X25519_PKCS8 = _asn1(
    "    0:d=0  hl=2 l=  46 cons: SEQUENCE          ",
    "    2:d=1  hl=2 l=   1 prim: INTEGER           :00",
    "    5:d=1  hl=2 l=   5 cons: SEQUENCE          ",
    "    7:d=2  hl=2 l=   3 prim: OBJECT            :X25519",
    "   12:d=1  hl=2 l=  34 prim: OCTET STRING      [HEX DUMP]:0420809F9A08A536CAFA5E4B3CAB4B43A85D3EF8FB9489644187D9AAAEB99688FD4D",
)
# `asn1parse -i -dump` of an Ed25519 key
ASN1_ED25519_INDENT_DUMP = _asn1(
    "    0:d=0  hl=2 l=  46 cons: SEQUENCE          ",
    "    2:d=1  hl=2 l=   1 prim:  INTEGER           :00",
    "    5:d=1  hl=2 l=   5 cons:  SEQUENCE          ",
    "    7:d=2  hl=2 l=   3 prim:   OBJECT            :ED25519",
    "   12:d=1  hl=2 l=  34 prim:  OCTET STRING      ",
    "      0000 - 04 20 ed e8 eb e4 7e dc-d2 92 44 9d 53 67 a7 ff   . ....~...D.Sg..",
    "      0010 - 79 0d 76 62 80 f3 49 73-af c3 91 05 cf 07 d1 41   y.vb..Is.......A",
    "      0020 - 77 8f                                             w.",
)
# `ecparam -genkey -noout -name secp384r1` (SEC 1)
ASN1_EC_SEC1 = _asn1(
    "    0:d=0  hl=3 l= 164 cons: SEQUENCE          ",
    "    3:d=1  hl=2 l=   1 prim: INTEGER           :01",
    "    6:d=1  hl=2 l=  48 prim: OCTET STRING      [HEX DUMP]:A2875C3C2A69D9E80CC9916190FB850066715CE804042F944592051B83259CB6384B9B2CCB5C76C80847E005F0622017",
    "   56:d=1  hl=2 l=   7 cons: cont [ 0 ]        ",
    "   58:d=2  hl=2 l=   5 prim: OBJECT            :secp384r1",
    "   65:d=1  hl=2 l= 100 cons: cont [ 1 ]        ",
    "   67:d=2  hl=2 l=  98 prim: BIT STRING        ",
)
# `pkey -aes256`: an encrypted PKCS#8 key
ASN1_ENCRYPTED_PKCS8 = _asn1(
    "    0:d=0  hl=4 l= 445 cons: SEQUENCE          ",
    "    4:d=1  hl=2 l=  87 cons: SEQUENCE          ",
    "    6:d=2  hl=2 l=   9 prim: OBJECT            :PBES2",
    "   17:d=2  hl=2 l=  74 cons: SEQUENCE          ",
    "   19:d=3  hl=2 l=  41 cons: SEQUENCE          ",
    "   21:d=4  hl=2 l=   9 prim: OBJECT            :PBKDF2",
    "   32:d=4  hl=2 l=  28 cons: SEQUENCE          ",
    "   34:d=5  hl=2 l=   8 prim: OCTET STRING      [HEX DUMP]:9710C882B95BDCEE",
    "   44:d=5  hl=2 l=   2 prim: INTEGER           :0800",
    "   48:d=5  hl=2 l=  12 cons: SEQUENCE          ",
    "   50:d=6  hl=2 l=   8 prim: OBJECT            :hmacWithSHA256",
    "   60:d=6  hl=2 l=   0 prim: NULL              ",
    "   62:d=3  hl=2 l=  29 cons: SEQUENCE          ",
    "   64:d=4  hl=2 l=   9 prim: OBJECT            :aes-256-cbc",
    "   75:d=4  hl=2 l=  16 prim: OCTET STRING      [HEX DUMP]:37DD5B415443BAF1C92B6BCFA8AD8DA1",
    "   93:d=1  hl=4 l= 352 prim: OCTET STRING      [HEX DUMP]:DE106F9F6F8DC0B31C0B41EB604BFBBA0F1973E37FB2AC36B7C7CBCA6879FF45C5825DFF1566276D75C30C02B952687B3A77F451DAB4405F36055EA0BA6B218A0B72732D610DC578B30F9274DFC95FF5F69D07D0AA36786B9C8A15E8D2347F64C06C9AE5731ECFB18AA4F80DA46AA71716EA3D94C1BE3DA2E6B1D043BE538F09FB073C93FAC178BA87B2831F6361F77DE7ECEA2FCB4EF9B332C05F8DB370F2C9B712446958BB71580F0175C6250695726734D82E30CAA6AC4AB2F3F9D45F1EC162A0FF2DFBBCC6F5F716C88D8F7BB7089EBFFB287BF6BF600970788B2F1CE381AC8CB85B8868202CB48DF1BE98215A689DFC485ED634D440E8CCD1DE87CF573522851B5E55544889CAD2FE24EAE726EFCB2E0585379B840FD18BFBE34DC828C93E5407A2DC0D7A6CA2B4A4CAE6AD5945FB1A42319B76954EE0D5360481A7E5DB68948A2FC0A0DEFC2771642205B78BB345C99EC2F715DA24C7108FFE3D6B288E",
)
# `asn1parse -strparse 12` of the Ed25519 key: its inner OCTET STRING
ASN1_ED25519_STRPARSE = _asn1(
    "    0:d=0  hl=2 l=  32 prim: OCTET STRING      [HEX DUMP]:EDE8EBE47EDCD292449D5367A7FF790D766280F34973AFC39105CF07D141778F",
)
# an EC certificate (`req -x509`)
ASN1_CERT = _asn1(
    "    0:d=0  hl=4 l= 523 cons: SEQUENCE          ",
    "    4:d=1  hl=4 l= 432 cons: SEQUENCE          ",
    "    8:d=2  hl=2 l=   3 cons: cont [ 0 ]        ",
    "   10:d=3  hl=2 l=   1 prim: INTEGER           :02",
    "   13:d=2  hl=2 l=  20 prim: INTEGER           :36D87CA4D874DFDDA1D55E2561241A8F33D33C76",
    "   35:d=2  hl=2 l=  10 cons: SEQUENCE          ",
    "   37:d=3  hl=2 l=   8 prim: OBJECT            :ecdsa-with-SHA256",
    "   47:d=2  hl=2 l=  55 cons: SEQUENCE          ",
    "   49:d=3  hl=2 l=  31 cons: SET               ",
    "   51:d=4  hl=2 l=  29 cons: SEQUENCE          ",
    "   53:d=5  hl=2 l=   3 prim: OBJECT            :commonName",
    "   58:d=5  hl=2 l=  22 prim: UTF8STRING        :web-1.example.internal",
    "   82:d=3  hl=2 l=  20 cons: SET               ",
    "   84:d=4  hl=2 l=  18 cons: SEQUENCE          ",
    "   86:d=5  hl=2 l=   3 prim: OBJECT            :organizationName",
    "   91:d=5  hl=2 l=  11 prim: UTF8STRING        :Example Ops",
    "  104:d=2  hl=2 l=  30 cons: SEQUENCE          ",
    "  106:d=3  hl=2 l=  13 prim: UTCTIME           :261126130318Z",
    "  121:d=3  hl=2 l=  13 prim: UTCTIME           :261226130318Z",
    "  136:d=2  hl=2 l=  55 cons: SEQUENCE          ",
    "  138:d=3  hl=2 l=  31 cons: SET               ",
    "  140:d=4  hl=2 l=  29 cons: SEQUENCE          ",
    "  142:d=5  hl=2 l=   3 prim: OBJECT            :commonName",
    "  147:d=5  hl=2 l=  22 prim: UTF8STRING        :web-1.example.internal",
    "  171:d=3  hl=2 l=  20 cons: SET               ",
    "  173:d=4  hl=2 l=  18 cons: SEQUENCE          ",
    "  175:d=5  hl=2 l=   3 prim: OBJECT            :organizationName",
    "  180:d=5  hl=2 l=  11 prim: UTF8STRING        :Example Ops",
    "  193:d=2  hl=2 l=  89 cons: SEQUENCE          ",
    "  195:d=3  hl=2 l=  19 cons: SEQUENCE          ",
    "  197:d=4  hl=2 l=   7 prim: OBJECT            :id-ecPublicKey",
    "  206:d=4  hl=2 l=   8 prim: OBJECT            :prime256v1",
    "  216:d=3  hl=2 l=  66 prim: BIT STRING        ",
    "  284:d=2  hl=3 l= 153 cons: cont [ 3 ]        ",
    "  287:d=3  hl=3 l= 150 cons: SEQUENCE          ",
    "  290:d=4  hl=2 l=  29 cons: SEQUENCE          ",
    "  292:d=5  hl=2 l=   3 prim: OBJECT            :X509v3 Subject Key Identifier",
    "  297:d=5  hl=2 l=  22 prim: OCTET STRING      [HEX DUMP]:04148B5D1DC49FBFAAB31F8FA0D54B004E5A9E209E50",
    "  321:d=4  hl=2 l=  31 cons: SEQUENCE          ",
    "  323:d=5  hl=2 l=   3 prim: OBJECT            :X509v3 Authority Key Identifier",
    "  328:d=5  hl=2 l=  24 prim: OCTET STRING      [HEX DUMP]:301680148B5D1DC49FBFAAB31F8FA0D54B004E5A9E209E50",
    "  354:d=4  hl=2 l=  15 cons: SEQUENCE          ",
    "  356:d=5  hl=2 l=   3 prim: OBJECT            :X509v3 Basic Constraints",
    "  361:d=5  hl=2 l=   1 prim: BOOLEAN           :255",
    "  364:d=5  hl=2 l=   5 prim: OCTET STRING      [HEX DUMP]:30030101FF",
    "  371:d=4  hl=2 l=  33 cons: SEQUENCE          ",
    "  373:d=5  hl=2 l=   3 prim: OBJECT            :X509v3 Subject Alternative Name",
    "  378:d=5  hl=2 l=  26 prim: OCTET STRING      [HEX DUMP]:301882167765622D312E6578616D706C652E696E7465726E616C",
    "  406:d=4  hl=2 l=  11 cons: SEQUENCE          ",
    "  408:d=5  hl=2 l=   3 prim: OBJECT            :X509v3 Key Usage",
    "  413:d=5  hl=2 l=   4 prim: OCTET STRING      [HEX DUMP]:03020780",
    "  419:d=4  hl=2 l=  19 cons: SEQUENCE          ",
    "  421:d=5  hl=2 l=   3 prim: OBJECT            :X509v3 Extended Key Usage",
    "  426:d=5  hl=2 l=  12 prim: OCTET STRING      [HEX DUMP]:300A06082B06010505070301",
    "  440:d=1  hl=2 l=  10 cons: SEQUENCE          ",
    "  442:d=2  hl=2 l=   8 prim: OBJECT            :ecdsa-with-SHA256",
    "  452:d=1  hl=2 l=  73 prim: BIT STRING        ",
)
# the same, `-i -dump`
ASN1_CERT_INDENT_DUMP = _asn1(
    "    0:d=0  hl=4 l= 523 cons: SEQUENCE          ",
    "    4:d=1  hl=4 l= 432 cons:  SEQUENCE          ",
    "    8:d=2  hl=2 l=   3 cons:   cont [ 0 ]        ",
    "   10:d=3  hl=2 l=   1 prim:    INTEGER           :02",
    "   13:d=2  hl=2 l=  20 prim:   INTEGER           :36D87CA4D874DFDDA1D55E2561241A8F33D33C76",
    "   35:d=2  hl=2 l=  10 cons:   SEQUENCE          ",
    "   37:d=3  hl=2 l=   8 prim:    OBJECT            :ecdsa-with-SHA256",
    "   47:d=2  hl=2 l=  55 cons:   SEQUENCE          ",
    "   49:d=3  hl=2 l=  31 cons:    SET               ",
    "   51:d=4  hl=2 l=  29 cons:     SEQUENCE          ",
    "   53:d=5  hl=2 l=   3 prim:      OBJECT            :commonName",
    "   58:d=5  hl=2 l=  22 prim:      UTF8STRING        :web-1.example.internal",
    "   82:d=3  hl=2 l=  20 cons:    SET               ",
    "   84:d=4  hl=2 l=  18 cons:     SEQUENCE          ",
    "   86:d=5  hl=2 l=   3 prim:      OBJECT            :organizationName",
    "   91:d=5  hl=2 l=  11 prim:      UTF8STRING        :Example Ops",
    "  104:d=2  hl=2 l=  30 cons:   SEQUENCE          ",
    "  106:d=3  hl=2 l=  13 prim:    UTCTIME           :261126130318Z",
    "  121:d=3  hl=2 l=  13 prim:    UTCTIME           :261226130318Z",
    "  136:d=2  hl=2 l=  55 cons:   SEQUENCE          ",
    "  138:d=3  hl=2 l=  31 cons:    SET               ",
    "  140:d=4  hl=2 l=  29 cons:     SEQUENCE          ",
    "  142:d=5  hl=2 l=   3 prim:      OBJECT            :commonName",
    "  147:d=5  hl=2 l=  22 prim:      UTF8STRING        :web-1.example.internal",
    "  171:d=3  hl=2 l=  20 cons:    SET               ",
    "  173:d=4  hl=2 l=  18 cons:     SEQUENCE          ",
    "  175:d=5  hl=2 l=   3 prim:      OBJECT            :organizationName",
    "  180:d=5  hl=2 l=  11 prim:      UTF8STRING        :Example Ops",
    "  193:d=2  hl=2 l=  89 cons:   SEQUENCE          ",
    "  195:d=3  hl=2 l=  19 cons:    SEQUENCE          ",
    "  197:d=4  hl=2 l=   7 prim:     OBJECT            :id-ecPublicKey",
    "  206:d=4  hl=2 l=   8 prim:     OBJECT            :prime256v1",
    "  216:d=3  hl=2 l=  66 prim:    BIT STRING        ",
    "      0000 - 00 04 77 6b 4c ad a6 36-d4 12 b4 1d 04 65 f7 36   ..wkL..6.....e.6",
    "      0010 - b0 a6 25 64 10 f5 e0 d2-c2 0a 63 d1 0a 2d ae 31   ..%d......c..-.1",
    "      0020 - 31 83 7b 2c 81 07 55 d5-a4 4b b9 a0 44 36 c2 d0   1.{,..U..K..D6..",
    "      0030 - c2 79 d0 b3 10 8a d8 f6-c3 3a 26 76 fa 32 ae 7b   .y.......:&v.2.{",
    "      0040 - d9 58                                             .X",
    "  284:d=2  hl=3 l= 153 cons:   cont [ 3 ]        ",
    "  287:d=3  hl=3 l= 150 cons:    SEQUENCE          ",
    "  290:d=4  hl=2 l=  29 cons:     SEQUENCE          ",
    "  292:d=5  hl=2 l=   3 prim:      OBJECT            :X509v3 Subject Key Identifier",
    "  297:d=5  hl=2 l=  22 prim:      OCTET STRING      ",
    "      0000 - 04 14 8b 5d 1d c4 9f bf-aa b3 1f 8f a0 d5 4b 00   ...]..........K.",
    "      0010 - 4e 5a 9e 20 9e 50                                 NZ. .P",
    "  321:d=4  hl=2 l=  31 cons:     SEQUENCE          ",
    "  323:d=5  hl=2 l=   3 prim:      OBJECT            :X509v3 Authority Key Identifier",
    "  328:d=5  hl=2 l=  24 prim:      OCTET STRING      ",
    "      0000 - 30 16 80 14 8b 5d 1d c4-9f bf aa b3 1f 8f a0 d5   0....]..........",
    "      0010 - 4b 00 4e 5a 9e 20 9e 50-                          K.NZ. .P",
    "  354:d=4  hl=2 l=  15 cons:     SEQUENCE          ",
    "  356:d=5  hl=2 l=   3 prim:      OBJECT            :X509v3 Basic Constraints",
    "  361:d=5  hl=2 l=   1 prim:      BOOLEAN           :255",
    "  364:d=5  hl=2 l=   5 prim:      OCTET STRING      ",
    "      0000 - 30 03 01 01 ff                                    0....",
    "  371:d=4  hl=2 l=  33 cons:     SEQUENCE          ",
    "  373:d=5  hl=2 l=   3 prim:      OBJECT            :X509v3 Subject Alternative Name",
    "  378:d=5  hl=2 l=  26 prim:      OCTET STRING      ",
    "      0000 - 30 18 82 16 77 65 62 2d-31 2e 65 78 61 6d 70 6c   0...web-1.exampl",
    "      0010 - 65 2e 69 6e 74 65 72 6e-61 6c                     e.internal",
    "  406:d=4  hl=2 l=  11 cons:     SEQUENCE          ",
    "  408:d=5  hl=2 l=   3 prim:      OBJECT            :X509v3 Key Usage",
    "  413:d=5  hl=2 l=   4 prim:      OCTET STRING      ",
    "      0000 - 03 02 07 80                                       ....",
    "  419:d=4  hl=2 l=  19 cons:     SEQUENCE          ",
    "  421:d=5  hl=2 l=   3 prim:      OBJECT            :X509v3 Extended Key Usage",
    "  426:d=5  hl=2 l=  12 prim:      OCTET STRING      ",
    "      0000 - 30 0a 06 08 2b 06 01 05-05 07 03 01               0...+.......",
    "  440:d=1  hl=2 l=  10 cons:  SEQUENCE          ",
    "  442:d=2  hl=2 l=   8 prim:   OBJECT            :ecdsa-with-SHA256",
    "  452:d=1  hl=2 l=  73 prim:  BIT STRING        ",
    "      0000 - 00 30 46 02 21 00 c7 1f-30 17 16 94 f8 39 d5 c1   .0F.!...0....9..",
    "      0010 - 70 23 57 8c 96 3b 83 89-ac ec 5d 00 10 8f d0 76   p#W..;....]....v",
    '      0020 - d0 3c e3 e7 df 1f 02 21-00 b6 ee 22 a7 1a 47 3a   .<.....!..."..G:',
    "      0030 - 4c c7 95 d5 ce 97 40 02-84 be 8f b2 04 dd 27 4c   L.....@.......'L",
    "      0040 - d2 6c 3a 20 67 df 68 6b-d6                        .l: g.hk.",
)
# `pkey -pubout` of an RSA key
ASN1_PUBLIC_KEY = _asn1(
    "    0:d=0  hl=2 l=  92 cons: SEQUENCE          ",
    "    2:d=1  hl=2 l=  13 cons: SEQUENCE          ",
    "    4:d=2  hl=2 l=   9 prim: OBJECT            :rsaEncryption",
    "   15:d=2  hl=2 l=   0 prim: NULL              ",
    "   17:d=1  hl=2 l=  75 prim: BIT STRING        ",
)
# `ecparam -param_enc explicit`, `-i`
ASN1_EC_EXPLICIT_PARAMS = _asn1(
    "    0:d=0  hl=3 l= 247 cons: SEQUENCE          ",
    "    3:d=1  hl=2 l=   1 prim:  INTEGER           :01",
    "    6:d=1  hl=2 l=  44 cons:  SEQUENCE          ",
    "    8:d=2  hl=2 l=   7 prim:   OBJECT            :prime-field",
    "   17:d=2  hl=2 l=  33 prim:   INTEGER           :FFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF",
    "   52:d=1  hl=2 l=  91 cons:  SEQUENCE          ",
    "   54:d=2  hl=2 l=  32 prim:   OCTET STRING      [HEX DUMP]:FFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFC",
    "   88:d=2  hl=2 l=  32 prim:   OCTET STRING      [HEX DUMP]:5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B",
    "  122:d=2  hl=2 l=  21 prim:   BIT STRING        ",
    "  145:d=1  hl=2 l=  65 prim:  OCTET STRING      [HEX DUMP]:046B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C2964FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5",
    "  212:d=1  hl=2 l=  33 prim:  INTEGER           :FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551",
    "  247:d=1  hl=2 l=   1 prim:  INTEGER           :01",
)
# DSA parameters
ASN1_DSA_PARAMS = _asn1(
    "    0:d=0  hl=4 l= 295 cons: SEQUENCE          ",
    "    4:d=1  hl=3 l= 129 prim: INTEGER           :FA74585FFCE86365ADB9A8FA91723B54253699BA2DF2E9C77B89DCD9FE24E39773D4E4CE6425858A2A2145C15291A354F6A9E3D265EACA9DB51426E14698DA0CFE8028C444D061FECB9B9761BB7C0CA9C26AEC5671D4E34B07D9AD75CD7BCFC8D168CE009B4C3DAB8B8006F76D34629272F1E56BE4973CAB4CF09A24EE986FA9",
    "  136:d=1  hl=2 l=  29 prim: INTEGER           :D1F1A4A771F3B534D9018BC5F7D78CC09B9EC7DB4CFE6B63BC819EC5",
    "  167:d=1  hl=3 l= 129 prim: INTEGER           :E95958B5885B69D41A090F53443F04F915EBF77F2A2F3FB736041D8B5420C2243BCC99EA7B5528EE47B7E42E665C1F3AD0C32CE0A33FAD9C0E7DFFD46A914CB205B6BD969863F301ACD7A9E20F89642217B7A9EFD0B61BA47509F07D616C122D3BF64B64604341B27127750B1A6100E6B436B26405A4399BB6F8F5FEF391E744",
)


# OpenSSL 3.5's post-quantum keys printed as text (`openssl pkey -text`), which OpenSSL 3.0 cannot
# print: labels and layout as in openssl/openssl providers/implementations/encode_decode/
# ml_dsa_codecs.c (ossl_ml_dsa_key_to_text: "seed:", "priv:", "pub:"), ml_kem_codecs.c
# (ossl_ml_kem_key_to_text: "seed:", "dk:", "ek:") and crypto/slh_dsa/slh_dsa_key.c
# (ossl_slh_dsa_key_to_text: "priv:", "pub:"), each number by ossl_bio_print_labeled_buf
# (crypto/encode_decode/encoder_lib.c): the label's line, then 15 bytes a line, indented by 4.
# The bytes are made up (the sizes are ML-DSA-44's, ML-KEM-768's and SLH-DSA-SHA2-128s's).
def _labeled(label: str, size: int, key: str) -> str:
    data = hashlib.shake_256(f"{key} {label}".encode()).digest(size)
    rows = [":".join(f"{byte:02x}" for byte in data[i : i + 15]) for i in range(0, size, 15)]
    return label + "\n" + ":\n".join("    " + row for row in rows) + "\n"


ML_DSA_SEED, ML_DSA_PRIV = _labeled("seed:", 32, "ml-dsa"), _labeled("priv:", 2560, "ml-dsa")
ML_DSA_PUB = _labeled("pub:", 1312, "ml-dsa")
ML_KEM_SEED, ML_KEM_DK = _labeled("seed:", 64, "ml-kem"), _labeled("dk:", 2400, "ml-kem")
ML_KEM_EK = _labeled("ek:", 1184, "ml-kem")
SLH_DSA_PRIV, SLH_DSA_PUB = _labeled("priv:", 64, "slh-dsa"), _labeled("pub:", 32, "slh-dsa")


def _hex_row(number: str, row: int) -> str:
    """The ``row``th hex line (from 0) of ``number`` (a `_labeled` one), without its indent."""
    return number.split("\n")[row + 1].strip()


def _hidden_number(number: str) -> str:
    return number.split("\n")[0] + "\n    [REDACTED]\n"


SECRETS: tuple[SecretCase, ...] = (
    # --- private key blocks
    SecretCase(
        "pem_rsa",
        f"cat id_rsa:\n-----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}\n-----END RSA PRIVATE KEY-----\ndone",
        RSA_BODY,
        "cat id_rsa:\n[REDACTED]\ndone",
    ),
    SecretCase(
        "pem_pkcs8",
        f"key file:\n-----BEGIN PRIVATE KEY-----\n{PKCS8_BODY}\n-----END PRIVATE KEY-----\n",
        PKCS8_BODY,
        "key file:\n[REDACTED]\n",
    ),
    SecretCase(
        "pem_ec",
        f"-----BEGIN EC PRIVATE KEY-----\n{EC_BODY}\n-----END EC PRIVATE KEY-----",
        EC_BODY,
        "[REDACTED]",
    ),
    SecretCase(
        "pem_encrypted",
        f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{PKCS8_BODY}\n-----END ENCRYPTED PRIVATE KEY-----",
        PKCS8_BODY,
    ),
    SecretCase(
        "openssh_private_key",
        f"~/.ssh/id_ed25519: -----BEGIN OPENSSH PRIVATE KEY-----\n{OPENSSH_BODY}\n"
        "-----END OPENSSH PRIVATE KEY-----",
        OPENSSH_BODY,
        "~/.ssh/id_ed25519: [REDACTED]",
    ),
    SecretCase(
        "pgp_private_key_block",
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n=Ab3x\n-----END PGP PRIVATE KEY BLOCK-----\n",
        PGP_BODY,
    ),
    SecretCase(
        "pem_truncated_without_end",
        f"tail of a capped file: -----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}\nMIIEowIBAAK…[truncated]",
        RSA_BODY,
        "tail of a capped file: [REDACTED]",
    ),
    SecretCase(
        "putty_ppk_private_lines",
        "PuTTY-User-Key-File-3: ssh-ed25519\nPrivate-Lines: 1\nAAAAIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oYbTB+3bg1qR\n"
        "Private-MAC: 1a2b3c",
        "AAAAIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oYbTB+3bg1qR",
    ),
    SecretCase(
        "gcp_service_account_json",
        '{"type": "service_account", "project_id": "demo", "private_key": '
        f'"-----BEGIN PRIVATE KEY-----\\n{PKCS8_BODY}\\n-----END PRIVATE KEY-----\\n", "client_email": "a@b.iam"}}',
        PKCS8_BODY,
    ),
    SecretCase(
        "gcp_private_key_id",
        '{"private_key_id": "8f3c2a1b9e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b", "client_id": "1234"}',
        "8f3c2a1b9e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b",
        '{"private_key_id": "[REDACTED]", "client_id": "1234"}',
    ),
    # --- cloud access keys
    SecretCase("aws_access_key_id", "using credentials AKIAIOSFODNN7EXAMPLE for s3", "AKIAIOSFODNN7EXAMPLE"),
    SecretCase(
        "aws_session_key_id", "assumed role, key ASIAY34FZKBOKMUTVV7A expires", "ASIAY34FZKBOKMUTVV7A"
    ),
    SecretCase(
        "aws_credentials_file",
        "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "[default]\naws_access_key_id = [REDACTED]\naws_secret_access_key = [REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "aws_secret_env",
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY aws s3 ls",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    SecretCase("google_api_key", f"maps?key={GOOGLE_API}&q=paris", GOOGLE_API),
    SecretCase("google_oauth_token", f"gcloud token {GOOGLE_OAUTH} cached", GOOGLE_OAUTH),
    SecretCase(
        "azure_storage_connection_string",
        "DefaultEndpointsProtocol=https;AccountName=logs;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
    ),
    SecretCase(
        "azure_sas_url",
        "GET https://logs.blob.core.windows.net/c/app.log?sv=2022-11-02&ss=b&srt=o&sp=r"
        "&se=2030-01-01T00:00:00Z&sig=2Zk9Xx%2Fq8R1vO0mN3bL4kJ6hG7fD5sA%3D HTTP/1.1",
        "2Zk9Xx%2Fq8R1vO0mN3bL4kJ6hG7fD5sA%3D",
    ),
    SecretCase(
        "s3_presigned_url",
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240101T000000Z"
        "&X-Amz-Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024",
        "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024",
    ),
    # --- vendor tokens
    SecretCase("github_pat_classic", f"remote: https://github.com (token {GITHUB_PAT})", GITHUB_PAT),
    SecretCase("github_pat_fine_grained", f"GH_AUTH={GITHUB_FINE}", GITHUB_FINE),
    SecretCase("github_oauth", f'{{"oauth": "{GITHUB_OAUTH}"}}', GITHUB_OAUTH),
    SecretCase(
        "sonde_api_key", f"curl -H 'X-Key: {SONDE_API_KEY}' http://hub:3000/api/v1/agents", SONDE_API_KEY
    ),
    SecretCase(
        "sonde_enrollment_token", f"sonde enroll --hub https://hub:3000 --token {SONDE_ENROLL}", SONDE_ENROLL
    ),
    SecretCase("gitlab_pat", f"git clone https://ci@gitlab.com/x.git using {GITLAB}", GITLAB),
    SecretCase("slack_bot_token", f"slack client init with {SLACK_BOT}", SLACK_BOT),
    SecretCase("slack_user_token", f"'{SLACK_USER}'", SLACK_USER),
    SecretCase(
        "slack_webhook",
        "POST https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX 200",
        "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    ),
    SecretCase("stripe_live_secret", f"charge failed for key {STRIPE}: card_declined", STRIPE),
    SecretCase("stripe_restricted", f"stripe.api_base ok; using {STRIPE_RESTRICTED}", STRIPE_RESTRICTED),
    SecretCase("openai_project_key", f"OPENAI={OPENAI}", OPENAI),
    SecretCase("anthropic_key", f"client = Anthropic({ANTHROPIC})", ANTHROPIC),
    SecretCase("npm_token", f"//registry.npmjs.org/:_authToken={NPM}", NPM),
    SecretCase("pypi_token", f"twine upload -u __token__ -p {PYPI} dist/*", PYPI),
    SecretCase("hugging_face_token", f"huggingface-cli login {HUGGING_FACE}", HUGGING_FACE),
    SecretCase("vault_token", f"vault login {VAULT}", VAULT),
    SecretCase("sendgrid_key", f"mailer: {SENDGRID}", SENDGRID),
    SecretCase("digitalocean_token", f"doctl auth init -t {DIGITALOCEAN}", DIGITALOCEAN),
    SecretCase("docker_hub_pat", f"echo {DOCKER_HUB} | docker login", DOCKER_HUB),
    SecretCase("jwt_in_log", f"session {JWT} accepted", JWT, "session [REDACTED] accepted"),
    # --- bearer and basic credentials
    SecretCase(
        "authorization_bearer_header",
        "> GET /v1/me HTTP/1.1\n> Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543\n> Accept: */*",
        "8f14e45fceea167a5a36dedd4bea2543",
        "> GET /v1/me HTTP/1.1\n> Authorization: Bearer [REDACTED]\n> Accept: */*",
    ),
    SecretCase(
        "authorization_basic_header",
        "Authorization: Basic YWRtaW46czNjcjN0UGFzcw==",
        "YWRtaW46czNjcjN0UGFzcw==",
        "Authorization: Basic [REDACTED]",
    ),
    SecretCase(
        "bearer_in_curl_command",
        "curl -H 'Authorization: Bearer 0b7a1c2d3e4f5a6b7c8d9e0f' https://api",
        "0b7a1c2d3e4f5a6b7c8d9e0f",
    ),
    SecretCase("bearer_without_header", "retrying with bearer tok_9Z8y7X6w5V4u3T2s", "tok_9Z8y7X6w5V4u3T2s"),
    SecretCase("basic_without_header", "proxy sent Basic dXNlcjpodW50ZXIy upstream", "dXNlcjpodW50ZXIy"),
    SecretCase(
        "cookie_header",
        "Cookie: sessionid=3f2a9c1b7e; csrftoken=Zx81kq",
        "sessionid=3f2a9c1b7e; csrftoken=Zx81kq",
        "Cookie: [REDACTED]",
    ),
    SecretCase(
        "set_cookie_header",
        "Set-Cookie: SESSION=aGVsbG8td29ybGQ; Path=/; HttpOnly",
        "SESSION=aGVsbG8td29ybGQ",
    ),
    SecretCase("x_api_key_header", "X-API-Key: 5up3r-s3cr3t-k3y-42", "5up3r-s3cr3t-k3y-42"),
    # --- passwords in URLs and connection strings
    SecretCase(
        "postgres_url",
        "DATABASE_URL=postgres://app:s3cr3t-Pa55@db:5432/x",
        "s3cr3t-Pa55",
        "DATABASE_URL=postgres://app:[REDACTED]@db:5432/x",
    ),
    SecretCase(
        "postgresql_url_with_at_sign_in_password",
        "dsn postgresql://report:p@ss:w0rd@10.0.0.5/reports?sslmode=require",
        "p@ss:w0rd",
        "dsn postgresql://report:[REDACTED]@10.0.0.5/reports?sslmode=require",
    ),
    SecretCase("mysql_url", "mysql://root:r00tPw@127.0.0.1:3306/shop", "r00tPw"),
    SecretCase(
        "mongodb_srv_url",
        "mongodb+srv://svc:Mongo%21Pass@cluster0.ab1cd.mongodb.net/?retryWrites=true",
        "Mongo%21Pass",
        "mongodb+srv://svc:[REDACTED]@cluster0.ab1cd.mongodb.net/?retryWrites=true",
    ),
    SecretCase(
        "redis_url_empty_user",
        "redis://:foobared@cache:6379/0",
        "foobared",
        "redis://:[REDACTED]@cache:6379/0",
    ),
    SecretCase("rediss_url", "broker rediss://default:AVNS_x9yZ@redis.cloud:25061", "AVNS_x9yZ"),
    SecretCase("amqp_url", "amqp://guest:gu3st-pw@rabbit:5672/%2F", "gu3st-pw"),
    SecretCase("amqps_url", "CELERY_BROKER=amqps://celery:c3l3ry@mq.internal/vhost", "c3l3ry"),
    SecretCase(
        "https_url_credentials", "fetching https://deploy:hunter2@git.example.com/repo.git", "hunter2"
    ),
    SecretCase("ftp_url", "mirror ftp://anon:ftp-s3cret@files.example.org/pub", "ftp-s3cret"),
    SecretCase(
        "libpq_conninfo",
        "connection: host=db port=5432 dbname=app user=app password=Pg-Pa55w0rd sslmode=require",
        "Pg-Pa55w0rd",
        "connection: host=db port=5432 dbname=app user=app password=[REDACTED] sslmode=require",
    ),
    SecretCase(
        "ado_net_connection_string",
        "Server=tcp:sql.example.net,1433;Database=app;User ID=app;Password=Ad0-N3t!pw;Encrypt=True;",
        "Ad0-N3t!pw",
        "Server=tcp:sql.example.net,1433;Database=app;User ID=app;Password=[REDACTED];Encrypt=True;",
    ),
    SecretCase("odbc_pwd", "Driver={ODBC Driver 18};Server=db;Uid=sa;Pwd=0dbcPw!;", "0dbcPw!"),
    SecretCase(
        "go_mysql_dsn",
        "dsn: app:g0-dsn-pw@tcp(mysql:3306)/app?parseTime=true",
        "g0-dsn-pw",
        "dsn: app:[REDACTED]@tcp(mysql:3306)/app?parseTime=true",
    ),
    # --- assignments in text
    SecretCase("yaml_password", "database:\n  user: app\n  password: yaml-pw-123\n", "yaml-pw-123"),
    SecretCase(
        "yaml_quoted_secret",
        "client:\n  secret: 'q8 w7 e6'\n",
        "q8 w7 e6",
        "client:\n  secret: '[REDACTED]'\n",
    ),
    SecretCase("env_db_password", "export DB_PASSWORD=env-pw-456", "env-pw-456"),
    SecretCase("ini_passwd", "[smtp]\nhost = mail\npasswd = 1ni-pw\n", "1ni-pw"),
    SecretCase("logfmt_token", "level=info msg=login token=abc123tok user=bob", "abc123tok"),
    SecretCase("api_key_assignment", "api_key=ak_live_77aa88bb99cc", "ak_live_77aa88bb99cc"),
    SecretCase(
        "json_text_api_key",
        '{"service": "maps", "apiKey": "AK-5544-3322", "region": "eu"}',
        "AK-5544-3322",
        '{"service": "maps", "apiKey": "[REDACTED]", "region": "eu"}',
    ),
    SecretCase("json_text_client_secret", '{"client_id":"web","client_secret":"cs-9f8e7d"}', "cs-9f8e7d"),
    SecretCase("escaped_json_in_log", 'payload="{\\"password\\":\\"esc-pw-1\\"}"', "esc-pw-1"),
    SecretCase("cli_flag_equals", "app --db-password=flag-pw-1 --verbose", "flag-pw-1"),
    SecretCase("cli_flag_space", "worker --password 'flag pw 2' --port 80", "flag pw 2"),
    SecretCase("redis_requirepass_flag", "redis-server *:6379 --requirepass r3dis-pw", "r3dis-pw"),
    SecretCase("redis_conf_directive", "bind 127.0.0.1\nrequirepass c0nf-pw\nport 6379", "c0nf-pw"),
    SecretCase("mysql_p_flag", "mysqldump -uroot -pmy-dump-pw shop > shop.sql", "my-dump-pw"),
    SecretCase("unspaced_colon", "jdbc.user=app\njdbc.password:pr0p-pw\n", "pr0p-pw"),
    SecretCase("openssl_passin", "openssl rsa -in k.pem -passin pass:0pen-pw -out k2.pem", "0pen-pw"),
    SecretCase(
        "redis_cli_a",
        "/usr/bin/redis-cli -h cache -p 6380 -a r3d-cli-pw --no-auth-warning ping",
        "r3d-cli-pw",
        "/usr/bin/redis-cli -h cache -p 6380 -a [REDACTED] --no-auth-warning ping",
    ),
    SecretCase("sshpass_p", "sshpass -p 'ssh-p4ss' ssh deploy@web-1 uptime", "ssh-p4ss"),
    SecretCase("sshpass_p_attached", "sshpass -pssh-p4ss2 scp a b:", "ssh-p4ss2"),
    SecretCase(
        "curl_user",
        "curl -fsS -u deploy:curl-pw-9 https://ci.example.com/api",
        "curl-pw-9",
        "curl -fsS -u deploy:[REDACTED] https://ci.example.com/api",
    ),
    SecretCase("curl_user_equals", "curl --user=bot:curl-pw-10 http://x", "curl-pw-10"),
    SecretCase("ldap_w", "ldapsearch -x -D cn=admin,dc=ex -w ld4p-pw -b dc=ex", "ld4p-pw"),
    SecretCase(
        "mongosh_p", "mongosh --host db -u admin -p m0ngo-pw --authenticationDatabase admin", "m0ngo-pw"
    ),
    SecretCase("netrc", "machine api.example.com login bot password n3trc-pw", "n3trc-pw"),
    SecretCase(
        "xml_password_element",
        "<datasource><user>app</user><password>xml-pw-7</password></datasource>",
        "xml-pw-7",
        "<datasource><user>app</user><password>[REDACTED]</password></datasource>",
    ),
    SecretCase("php_array", "'password' => 'php-pw-8',", "php-pw-8"),
    SecretCase("java_properties", "spring.datasource.password=jdbc-pw-9", "jdbc-pw-9"),
    SecretCase("pgpassword_env", "PGPASSWORD=pg-env-pw psql -h db", "pg-env-pw"),
    SecretCase("mysql_pwd_env", "MYSQL_PWD=my-env-pw", "my-env-pw"),
    SecretCase("smtp_pass_env", "SMTP_PASS=smtp-pw-10", "smtp-pw-10"),
    SecretCase("query_access_token", "GET /callback?code=ok&access_token=qat-123456 HTTP/1.1", "qat-123456"),
    SecretCase(
        "docker_config_auth",
        '{"auths": {"ghcr.io": {"auth": "dXNlcjpkb2NrZXItcHc="}}}',
        "dXNlcjpkb2NrZXItcHc=",
    ),
    SecretCase(
        "k8s_secret_data",
        "apiVersion: v1\nkind: Secret\ndata:\n  password: cGFzc3dvcmQxMjM=\n",
        "cGFzc3dvcmQxMjM=",
    ),
    # --- passwords in SQL statements (pg_stat_activity, the MySQL process list)
    SecretCase(
        "sql_alter_role_password",
        "ALTER ROLE r PASSWORD 'hunter2_first'",
        "hunter2_first",
        "ALTER ROLE r PASSWORD '[REDACTED]'",
    ),
    SecretCase("sql_alter_role_with_password", "ALTER ROLE r WITH PASSWORD 'hunter2_with';", "hunter2_with"),
    SecretCase(
        "sql_create_role_encrypted_password",
        "create role app encrypted password 'hunter2_enc' login valid until '2030-01-01'",
        "hunter2_enc",
        "create role app encrypted password '[REDACTED]' login valid until '2030-01-01'",
    ),
    SecretCase(
        "sql_password_escape_string",
        "ALTER USER app PASSWORD E'hun\\'ter2_e' LOGIN",
        "ter2_e",
        "ALTER USER app PASSWORD E'[REDACTED]' LOGIN",
    ),
    SecretCase("sql_password_doubled_quote", "ALTER ROLE r PASSWORD 'it''s_hunter2';", "s_hunter2"),
    SecretCase(
        "sql_password_dollar_quoted",
        "ALTER ROLE r PASSWORD $pw$hunter2$dollar$pw$ LOGIN",
        "hunter2$dollar",
        "ALTER ROLE r PASSWORD $pw$[REDACTED]$pw$ LOGIN",
    ),
    SecretCase(
        "mysql_identified_by",
        "CREATE USER 'u'@'localhost' IDENTIFIED BY 'hunter2_mysql'",
        "hunter2_mysql",
        "CREATE USER 'u'@'localhost' IDENTIFIED BY '[REDACTED]'",
    ),
    SecretCase(
        "mysql_identified_with_plugin",
        "ALTER USER 'u'@'%' IDENTIFIED WITH caching_sha2_password BY 'hunter2_plugin' REQUIRE SSL",
        "hunter2_plugin",
    ),
    SecretCase(
        "mariadb_password_function",
        "ALTER USER u IDENTIFIED VIA mysql_native_password USING PASSWORD('hunter2_fn')",
        "hunter2_fn",
    ),
    SecretCase(
        "mysql_set_password_for",
        "SET PASSWORD FOR 'bob'@'%' = 'hunter2_set'",
        "hunter2_set",
        "SET PASSWORD FOR 'bob'@'%' = '[REDACTED]'",
    ),
    SecretCase("sql_password_cut_short", "ALTER ROLE r PASSWORD 'hunter2_cu…", "hunter2_cu"),
    # --- secrets cut short before their end (a line, message or field cap)
    SecretCase(
        "url_password_cut_at_end",
        "could not connect to postgres://app:hunter2sec",
        "hunter2sec",
        "could not connect to postgres://app:[REDACTED]",
    ),
    SecretCase("url_password_cut_with_ellipsis", "DSN=mysql://root:hunter2_ro…", "hunter2_ro"),
    SecretCase(
        "xml_value_cut_in_end_tag",
        "<user>app</user><password>hunter2secret</pas",
        "hunter2secret",
        "<user>app</user><password>[REDACTED]</pas",
    ),
    SecretCase("xml_value_cut_in_value", "<db><secret>hunter2sec…", "hunter2sec"),
    SecretCase("quoted_value_cut", 'conf password="hunter2s', "hunter2s", 'conf password="[REDACTED]"'),
    SecretCase("single_quoted_value_cut", "'password' => 'hunter2_php…", "hunter2_php"),
    SecretCase("escaped_quoted_value_cut", 'log {\\"token\\": \\"hunter2tok…', "hunter2tok"),
    # --- further shapes
    SecretCase(
        "docker_login_p",
        "docker login -u bob -p hunter2_dock registry.example.com",
        "hunter2_dock",
        "docker login -u bob -p [REDACTED] registry.example.com",
    ),
    SecretCase(
        "smbclient_user_percent",
        "smbclient //fs/share -U bob%hunter2_smb -c ls",
        "hunter2_smb",
        "smbclient //fs/share -U bob%[REDACTED] -c ls",
    ),
    SecretCase(
        "htpasswd_b",
        "htpasswd -b /etc/nginx/.htpasswd bob hunter2_ht",
        "hunter2_ht",
        "htpasswd -b /etc/nginx/.htpasswd bob [REDACTED]",
    ),
    SecretCase("htpasswd_nb", "htpasswd -nbB bob hunter2_nb > out", "hunter2_nb"),
    SecretCase(
        "yaml_block_scalar",
        "db:\n  password: |\n    hunter2_block\n  user: app\n",
        "hunter2_block",
        "db:\n  password: |\n    [REDACTED]\n  user: app\n",
    ),
    SecretCase(
        "dotnet_add_key",
        '<appSettings><add key="Password" value="hunter2_net"/></appSettings>',
        "hunter2_net",
        '<appSettings><add key="Password" value="[REDACTED]"/></appSettings>',
    ),
    SecretCase(
        "jdbc_oracle_thin",
        "url=jdbc:oracle:thin:scott/hunter2_ora@db:1521:orcl",
        "hunter2_ora",
        "url=jdbc:oracle:thin:scott/[REDACTED]@db:1521:orcl",
    ),
    SecretCase("sqlplus_login", "sqlplus -s scott/hunter2_sqp@orcl @report.sql", "hunter2_sqp"),
    SecretCase(
        "sqlplus_quoted_password",
        'sqlplus -s scott/"hunter2 q@x"@orcl @report.sql',
        "hunter2 q@x",
        'sqlplus -s scott/"[REDACTED]"@orcl @report.sql',
    ),
    SecretCase(
        "pgpass_line",
        "db.internal:5432:*:app:hunter2_pgp\n*:*:*:ro:hunter2_pgq",
        "hunter2_pgp",
        "db.internal:5432:*:app:[REDACTED]\n*:*:*:ro:[REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "session_id_cookies",
        "GET / sessionid=hunter2sess; PHPSESSID=hunter2php",
        "hunter2php",
        "GET / sessionid=[REDACTED]; PHPSESSID=[REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "url_password_with_slash",
        "postgres://app:hunter/2@db:5432/x",
        "hunter/2",
        "postgres://app:[REDACTED]@db:5432/x",
    ),
    SecretCase("url_password_with_space", "mongodb://admin:hunter 2x@db/admin", "hunter 2x"),
    SecretCase("redis_auth_command", "AUTH default hunter2_auth", "hunter2_auth", "AUTH default [REDACTED]"),
    SecretCase(
        "redis_config_set_requirepass",
        "CONFIG SET requirepass hunter2_cfg",
        "hunter2_cfg",
        "CONFIG SET requirepass [REDACTED]",
    ),
    # --- programs' password arguments on a joined command line (system.processes.top)
    SecretCase(
        "redis_cli_auth_word",
        "redis-cli -h cache auth hunter2_rca",
        "hunter2_rca",
        "redis-cli -h cache auth [REDACTED]",
    ),
    SecretCase(
        "redis_cli_auth_user",
        "/usr/bin/redis-cli -h cache AUTH app hunter2_rcu",
        "hunter2_rcu",
        "/usr/bin/redis-cli -h cache AUTH app [REDACTED]",
    ),
    SecretCase(
        "redis_cli_hello_auth",
        "redis-cli HELLO 3 AUTH app hunter2_rch SETNAME c1",
        "hunter2_rch",
        "redis-cli HELLO 3 AUTH app [REDACTED] SETNAME c1",
    ),
    SecretCase("redis_cli_config_set", "redis-cli config set masterauth hunter2_rcc", "hunter2_rcc"),
    SecretCase(
        "rabbitmqctl_add_user",
        "rabbitmqctl add_user bob hunter2_rmq",
        "hunter2_rmq",
        "rabbitmqctl add_user bob [REDACTED]",
    ),
    SecretCase(
        "rabbitmqctl_change_password_quoted",
        "rabbitmqctl -n rabbit@h change_password bob 'hunter2 rmq'",
        "hunter2 rmq",
        "rabbitmqctl -n rabbit@h change_password bob '[REDACTED]'",
    ),
    SecretCase(
        "zip_capital_p",
        "zip -P hunter2_zip -r out.zip dir",
        "hunter2_zip",
        "zip -P [REDACTED] -r out.zip dir",
    ),
    SecretCase("unzip_capital_p", "unzip -o -P hunter2_unz a.zip", "hunter2_unz"),
    SecretCase(
        "7z_p_attached",
        "/usr/bin/7z a -phunter2_7z -mhe=on x.7z dir",
        "hunter2_7z",
        "/usr/bin/7z a -p[REDACTED] -mhe=on x.7z dir",
    ),
    SecretCase(
        "mosquitto_sub_p", "mosquitto_sub -h broker -u app -P hunter2_mq -t 'sensors/#'", "hunter2_mq"
    ),
    SecretCase(
        "ipmitool_p", "ipmitool -I lanplus -H bmc -U admin -P hunter2_ipmi chassis status", "hunter2_ipmi"
    ),
    SecretCase("sqlcmd_p", "sqlcmd -S db -U sa -P hunter2_sql -Q 'select 1'", "hunter2_sql"),
    SecretCase(
        "etcdctl_user",
        "etcdctl --endpoints=http://e:2379 --user root:hunter2_etcd get /k",
        "hunter2_etcd",
        "etcdctl --endpoints=http://e:2379 --user root:[REDACTED] get /k",
    ),
    SecretCase("etcdctl_user_equals", "etcdctl --user=root:hunter2_etc2 get /k", "hunter2_etc2"),
    SecretCase(
        "nmcli_wifi_password",
        "nmcli dev wifi connect HomeNet password hunter2_wifi",
        "hunter2_wifi",
        "nmcli dev wifi connect HomeNet password [REDACTED]",
    ),
    SecretCase("nmcli_psk", "nmcli con modify HomeNet wifi-sec.psk hunter2_psk", "hunter2_psk"),
    SecretCase(
        "aws_configure_set",
        "aws configure set aws_secret_access_key hunter2_aws --profile dev",
        "hunter2_aws",
        "aws configure set aws_secret_access_key [REDACTED] --profile dev",
    ),
    SecretCase(
        "aws_configure_set_profile",
        "aws configure set profile.dev.aws_session_token hunter2_tok",
        "hunter2_tok",
    ),
    SecretCase(
        "mysqladmin_password",
        "mysqladmin -uroot password hunter2_adm",
        "hunter2_adm",
        "mysqladmin -uroot password [REDACTED]",
    ),
    SecretCase(
        "mosquitto_passwd_b",
        "mosquitto_passwd -b /etc/mosquitto/passwd bob hunter2_mqp",
        "hunter2_mqp",
        "mosquitto_passwd -b /etc/mosquitto/passwd bob [REDACTED]",
    ),
    SecretCase(
        "redis_cli_migrate_auth",
        "redis-cli MIGRATE h 6379  0 5000 AUTH hunter2_mig KEYS k1 k2",
        "hunter2_mig",
        "redis-cli MIGRATE h 6379  0 5000 AUTH [REDACTED] KEYS k1 k2",
    ),
    SecretCase(
        "redis_cli_migrate_auth2",
        "redis-cli MIGRATE h 6379  0 5000 AUTH2 bob hunter2_mi2 KEYS k1",
        "hunter2_mi2",
        "redis-cli MIGRATE h 6379  0 5000 AUTH2 bob [REDACTED] KEYS k1",
    ),
    SecretCase(
        "redis_cli_acl_setuser",
        "redis-cli ACL SETUSER bob on >hunter2_acl >hunter2_ac2 <hunter2_ac3 #" + "5e88" * 16 + " ~* +@all",
        "hunter2_ac",
        "redis-cli ACL SETUSER bob on >[REDACTED] >[REDACTED] <[REDACTED] #" + "5e88" * 16 + " ~* +@all",
        redactions=3,
    ),
    SecretCase(
        "redis_cli_host_auth",
        "redis-cli -h auth -p 6380 AUTH hunter2_rha",
        "hunter2_rha",
        "redis-cli -h auth -p 6380 AUTH [REDACTED]",
    ),
    SecretCase(
        "samba_net_ads_join",
        "net ads join -U admin%hunter2_net",
        "hunter2_net",
        "net ads join -U admin%[REDACTED]",
    ),
    SecretCase("samba_net_rpc", "/usr/bin/net rpc user add x -Uadmin%hunter2_nrp", "hunter2_nrp"),
    SecretCase(
        "lftp_user_comma",
        "lftp -u bob,hunter2_lftp ftp.example.com",
        "hunter2_lftp",
        "lftp -u bob,[REDACTED] ftp.example.com",
    ),
    SecretCase(
        "xfreerdp_p",
        "xfreerdp /v:host /u:bob /p:hunter2_rdp /cert:ignore",
        "hunter2_rdp",
        "xfreerdp /v:host /u:bob /p:[REDACTED] /cert:ignore",
    ),
    SecretCase("xfreerdp_password", "xfreerdp /v:host /password:hunter2_rdq", "hunter2_rdq"),
    SecretCase(
        "rdesktop_p",
        "rdesktop -u bob -p hunter2_rde host",
        "hunter2_rde",
        "rdesktop -u bob -p [REDACTED] host",
    ),
    SecretCase("ncftp_p", "ncftp -u bob -p hunter2_ncf ftp.example.com", "hunter2_ncf"),
    SecretCase(
        "bcp_capital_p",
        "bcp db.dbo.t out f.dat -S srv -U sa -P hunter2_bcp -c",
        "hunter2_bcp",
        "bcp db.dbo.t out f.dat -S srv -U sa -P [REDACTED] -c",
    ),
    SecretCase(
        "isql_positional",
        "isql MyDSN bob hunter2_isql",
        "hunter2_isql",
        "isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_positional_flags",
        "/usr/bin/isql -v MyDSN bob hunter2_isq -b",
        "hunter2_isq",
        "/usr/bin/isql -v MyDSN bob [REDACTED] -b",
    ),
    SecretCase(
        "openssl_k",
        "openssl enc -aes-256-cbc -k hunter2_ssl -in a -out b",
        "hunter2_ssl",
        "openssl enc -aes-256-cbc -k [REDACTED] -in a -out b",
    ),
    SecretCase("rar_p", "rar a -phunter2_rar x.rar dir", "hunter2_rar", "rar a -p[REDACTED] x.rar dir"),
    SecretCase("unrar_hp", "unrar x -hphunter2_unr x.rar", "hunter2_unr", "unrar x -hp[REDACTED] x.rar"),
    SecretCase(
        "snmp_v3_passphrases",
        "snmpget -v3 -u bob -l authPriv -a SHA -A hunter2_snA -x AES -X hunter2_snX host sysUpTime.0",
        "hunter2_sn",
        "snmpget -v3 -u bob -l authPriv -a SHA -A [REDACTED] -x AES -X [REDACTED] host sysUpTime.0",
        redactions=2,
    ),
    SecretCase(
        "snmpwalk_community",
        "snmpwalk -v2c -c hunter2_com host system",
        "hunter2_com",
        "snmpwalk -v2c -c [REDACTED] host system",
    ),
    # "public" is the default community: hidden all the same (a community is a password)
    SecretCase(
        "snmp_public_community",
        "snmpbulkwalk -v2c -c public host ifTable",
        "public",
        "snmpbulkwalk -v2c -c [REDACTED] host ifTable",
    ),
    SecretCase("snmpset_community_attached", "snmpset -v2c -chunter2_sst host o i 1", "hunter2_sst"),
    SecretCase("snmptrap_auth", "snmptrap -v3 -u bob -A hunter2_stp host '' o", "hunter2_stp"),
    SecretCase("snmptable_community", "snmptable -v2c -c hunter2_stb host ifTable", "hunter2_stb"),
    SecretCase(
        "mc_alias_set",
        "mc alias set myminio http://minio:9000 AKEXAMPLE hunter2_mc --api S3v4",
        "hunter2_mc",
        "mc alias set myminio http://minio:9000 AKEXAMPLE [REDACTED] --api S3v4",
    ),
    SecretCase("vault_login_token", "vault login hunter2_vlt", "hunter2_vlt", "vault login [REDACTED]"),
    SecretCase(
        "vault_login_flags_token",
        "vault login -no-print -address https://v:8200 hunter2_vl2",
        "hunter2_vl2",
        "vault login -no-print -address https://v:8200 [REDACTED]",
    ),
    SecretCase(
        "rman_target_and_catalog",
        "rman target sys/hunter2_rmt@prod catalog rcat/hunter2_rmc@cat",
        "hunter2_rm",
        "rman target sys/[REDACTED]@prod catalog rcat/[REDACTED]@cat",
        redactions=2,
    ),
    SecretCase(
        "rman_duplicate_logons",
        "rman target sys/hunter2_rd1@p auxiliary sys/hunter2_rd2@a catalog=rcat/hunter2_rd3@c",
        "hunter2_rd",
        "rman target sys/[REDACTED]@p auxiliary sys/[REDACTED]@a catalog=rcat/[REDACTED]@c",
        redactions=3,
    ),
    SecretCase(
        "rman_target_equals", "rman target=sys/hunter2_rte", "hunter2_rte", "rman target=sys/[REDACTED]"
    ),
    SecretCase(
        "rabbitmqctl_pre_hashed",
        "rabbitmqctl add_user --pre-hashed-password bob hunter2_hash",
        "hunter2_hash",
        "rabbitmqctl add_user --pre-hashed-password bob [REDACTED]",
    ),
    # --- every password of a program on one joined line, not only its first
    SecretCase(
        "curl_user_and_proxy_user",
        "curl -u alice:hunter2_cu1 --proxy-user bob:hunter2_cu2 https://x",
        "hunter2_cu",
        "curl -u alice:[REDACTED] --proxy-user bob:[REDACTED] https://x",
        redactions=2,
    ),
    SecretCase(
        "mysql_p_twice",
        "mysqldump -uroot -phunter2_md1 -h db --password=hunter2_md2 -phunter2_md3 shop",
        "hunter2_md",
        "mysqldump -uroot -p[REDACTED] -h db --password=[REDACTED] -p[REDACTED] shop",
        redactions=3,
    ),
    SecretCase(
        "xfreerdp_password_and_gateway_password",
        "xfreerdp /v:host /u:bob /p:hunter2_xp1 /g:gw /gu:amy /gp:hunter2_xp2",
        "hunter2_xp",
        "xfreerdp /v:host /u:bob /p:[REDACTED] /g:gw /gu:amy /gp:[REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "ldap_w_twice",
        "ldapwhoami -x -w hunter2_lw1 -H ldap://a -w hunter2_lw2",
        "hunter2_lw",
        "ldapwhoami -x -w [REDACTED] -H ldap://a -w [REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "nmcli_two_secrets",
        "nmcli con modify office wifi-sec.psk hunter2_nm1 802-1x.password hunter2_nm2",
        "hunter2_nm",
        "nmcli con modify office wifi-sec.psk [REDACTED] 802-1x.password [REDACTED]",
        redactions=2,
    ),
    # a program's reach (200 characters) passed over another's password on the line
    SecretCase(
        "zip_between_curls",
        "curl -o f https://x && zip -P hunter2_zc a.zip f && curl -u a:hunter2_zd https://y",
        "hunter2_z",
        "curl -o f https://x && zip -P [REDACTED] a.zip f && curl -u a:[REDACTED] https://y",
        redactions=2,
    ),
    SecretCase(
        "repeats_on_later_lines",
        "ok\r\nredis-cli -a hunter2_rl1 -a hunter2_rl2\nzip -P hunter2_rl3 -P hunter2_rl4 x.zip",
        "hunter2_rl",
        "ok\r\nredis-cli -a [REDACTED] -a [REDACTED]\nzip -P [REDACTED] -P [REDACTED] x.zip",
        redactions=4,
    ),
    # MinIO client: mc admin user add ALIAS ACCESSKEY SECRETKEY
    SecretCase(
        "mc_admin_user_add",
        "mc admin user add myminio AKEXAMPLE hunter2_mcu",
        "hunter2_mcu",
        "mc admin user add myminio AKEXAMPLE [REDACTED]",
    ),
    SecretCase(
        "mc_admin_user_add_flags",
        "/usr/local/bin/mcli --json admin user add --insecure myminio bob hunter2_mcv",
        "hunter2_mcv",
        "/usr/local/bin/mcli --json admin user add --insecure myminio bob [REDACTED]",
    ),
    # Sybase/SAP ASE isql -U USER -P PW -S SERVER (the server is no password)
    SecretCase(
        "isql_sybase_attached",
        "isql -Usa -Phunter2_syb -SSYBASE -w 200",
        "hunter2_syb",
        "isql -Usa -P[REDACTED] -SSYBASE -w 200",
    ),
    SecretCase(
        "isql_sybase_separate",
        "/opt/sap/OCS-16_0/bin/isql -U sa -P hunter2_sy2 -S SYBASE -D master",
        "hunter2_sy2",
        "/opt/sap/OCS-16_0/bin/isql -U sa -P [REDACTED] -S SYBASE -D master",
    ),
    # unixODBC isql DSN USER PW behind the wrappers the argv form reads through
    SecretCase(
        "isql_sudo", "sudo isql MyDSN bob hunter2_isu", "hunter2_isu", "sudo isql MyDSN bob [REDACTED]"
    ),
    SecretCase(
        "isql_wrapped",
        "sudo -u app timeout 30 nice -n 5 /usr/bin/isql -v MyDSN bob hunter2_isw -b",
        "hunter2_isw",
        "sudo -u app timeout 30 nice -n 5 /usr/bin/isql -v MyDSN bob [REDACTED] -b",
    ),
    SecretCase(
        "isql_env",
        "env ODBCINI=/etc/odbc.ini isql MyDSN bob hunter2_ise",
        "hunter2_ise",
        "env ODBCINI=/etc/odbc.ini isql MyDSN bob [REDACTED]",
    ),
    # vault login TOKEN, flags after it
    SecretCase(
        "vault_login_token_then_flags",
        "vault login hunter2_vl3 -no-print",
        "hunter2_vl3",
        "vault login [REDACTED] -no-print",
    ),
    SecretCase(
        "vault_login_userpass",
        "vault login -method=userpass username=bob password=hunter2_vlp",
        "hunter2_vlp",
        "vault login -method=userpass username=bob password=[REDACTED]",
    ),
    # the older MinIO client: mc config host add ALIAS URL ACCESSKEY SECRETKEY [API]
    SecretCase(
        "mc_config_host_add",
        "mc config host add myminio http://minio:9000 AKEXAMPLE hunter2_mch --api S3v4",
        "hunter2_mch",
        "mc config host add myminio http://minio:9000 AKEXAMPLE [REDACTED] --api S3v4",
    ),
    SecretCase(
        "mcli_config_host_add",
        "/usr/local/bin/mcli config host add myminio https://s3.example.com AKEXAMPLE hunter2_mci S3v4",
        "hunter2_mci",
        "/usr/local/bin/mcli config host add myminio https://s3.example.com AKEXAMPLE [REDACTED] S3v4",
    ),
    # ldappasswd -w BINDPW -a OLDPW -s NEWPW
    SecretCase(
        "ldappasswd_old_and_new",
        "ldappasswd -x -D cn=admin,dc=ex -w hunter2_lpw -a hunter2_lpa -s hunter2_lps uid=bob,dc=ex",
        "hunter2_lp",
        "ldappasswd -x -D cn=admin,dc=ex -w [REDACTED] -a [REDACTED] -s [REDACTED] uid=bob,dc=ex",
        redactions=3,
    ),
    SecretCase(
        "ldappasswd_attached",
        "ldappasswd -x -ahunter2_lpb -shunter2_lpc uid=bob,dc=ex",
        "hunter2_lp",
        "ldappasswd -x -a[REDACTED] -s[REDACTED] uid=bob,dc=ex",
        redactions=2,
    ),
    # sqsh -U USER -P PW|-PPW -S SERVER (the server stays)
    SecretCase(
        "sqsh_p", "sqsh -U sa -P hunter2_sqs -S SYBASE", "hunter2_sqs", "sqsh -U sa -P [REDACTED] -S SYBASE"
    ),
    SecretCase(
        "sqsh_p_attached",
        "sqsh -Usa -Phunter2_sqt -SSYBASE",
        "hunter2_sqt",
        "sqsh -Usa -P[REDACTED] -SSYBASE",
    ),
    # vault login TOKEN with more after it: every item but flags and NAME=VALUE at the start of a
    # command, as the argv form reads it; the token ends its command before a separator word
    SecretCase(
        "vault_login_token_extra_arg",
        "vault login hunter2_vl4 extra-arg",
        "hunter2_vl4",
        "vault login [REDACTED] [REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "vault_login_token_then_separator",
        "vault login hunter2_vl5 && vault status",
        "hunter2_vl5",
        "vault login [REDACTED] && vault status",
    ),
    # a command line after the columns ps prints (ps -ef, ps aux, ps -o pid,args, pgrep -a, a tree)
    SecretCase(
        "isql_ps_ef",
        "root      1234     1  0 10:00 ?        00:00:00 isql MyDSN bob hunter2_pse",
        "hunter2_pse",
        "root      1234     1  0 10:00 ?        00:00:00 isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_ps_aux",
        "root      1234  0.0  0.1  12345  6789 pts/0    S+   10:00   0:00 isql MyDSN bob hunter2_psa",
        "hunter2_psa",
        "root      1234  0.0  0.1  12345  6789 pts/0    S+   10:00   0:00 isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_ps_pid_args",
        "    PID COMMAND\n      1 /sbin/init\n   1234 /usr/bin/isql -v MyDSN bob hunter2_psp",
        "hunter2_psp",
        "    PID COMMAND\n      1 /sbin/init\n   1234 /usr/bin/isql -v MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_pgrep", "48213 isql MyDSN bob hunter2_pgr", "hunter2_pgr", "48213 isql MyDSN bob [REDACTED]"
    ),
    SecretCase(
        "isql_ps_forest_sudo",
        "app       1235  1234  0 Jan01 pts/0    00:00:00  |   \\_ sudo -u app isql MyDSN bob hunter2_psf",
        "hunter2_psf",
        "app       1235  1234  0 Jan01 pts/0    00:00:00  |   \\_ sudo -u app isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "vault_ps_ef_extra_arg",
        "bob  4321  4300  0 09:12 pts/1  00:00:00 vault login hunter2_vl6 -no-print extra",
        "hunter2_vl6",
        "bob  4321  4300  0 09:12 pts/1  00:00:00 vault login [REDACTED] -no-print [REDACTED]",
        redactions=2,
    ),
    # ... or after a shell separator word (a history line, sudo's log)
    SecretCase(
        "isql_after_separator",
        "cd /srv/reports && isql MyDSN bob hunter2_sep | tee out.txt",
        "hunter2_sep",
        "cd /srv/reports && isql MyDSN bob [REDACTED] | tee out.txt",
    ),
    SecretCase(
        "isql_sudo_log",
        "sudo:  bob : TTY=pts/0 ; PWD=/home/bob ; USER=root ; COMMAND=/usr/bin/isql MyDSN bob hunter2_sul",
        "hunter2_sul",
        "sudo:  bob : TTY=pts/0 ; PWD=/home/bob ; USER=root ; COMMAND=/usr/bin/isql MyDSN bob [REDACTED]",
    ),
    # a program's reach ends at its command: sshpass's options at the program it runs, any
    # program's at a separator word; not at a "&" inside a URL
    SecretCase(
        "sshpass_then_ssh_port",
        "sshpass -p hunter2_ssp ssh -p 2222 deploy@web-1 uptime",
        "hunter2_ssp",
        "sshpass -p [REDACTED] ssh -p 2222 deploy@web-1 uptime",
    ),
    SecretCase(
        "sshpass_prompt_then_ssh_port",
        "sshpass -P assword: -phunter2_ssq ssh -p 2222 deploy@web-1",
        "hunter2_ssq",
        "sshpass -P assword: -p[REDACTED] ssh -p 2222 deploy@web-1",
    ),
    SecretCase(
        "docker_login_then_run",
        "docker login -u bob -p hunter2_dlr registry.example.com && docker run -p 8080:80 nginx",
        "hunter2_dlr",
        "docker login -u bob -p [REDACTED] registry.example.com && docker run -p 8080:80 nginx",
    ),
    SecretCase(
        "curl_users_around_a_quoted_url",
        'curl -u a:hunter2_cq1 "https://x/?a=1&b=2" -U p:hunter2_cq2',
        "hunter2_cq",
        'curl -u a:[REDACTED] "https://x/?a=1&b=2" -U p:[REDACTED]',
        redactions=2,
    ),
    SecretCase(
        "curl_users_around_a_bare_url",
        "curl -u a:hunter2_cb1 https://x/?a=1&b=2 -U p:hunter2_cb2",
        "hunter2_cb",
        "curl -u a:[REDACTED] https://x/?a=1&b=2 -U p:[REDACTED]",
        redactions=2,
    ),
    # a shell's xtrace (set -x) line: "+ " (one "+" more per nesting level) before the command,
    # which is then read as it is without it
    SecretCase(
        "xtrace_isql",
        "+ isql MYDSN alice hunter2_xti",
        "hunter2_xti",
        "+ isql MYDSN alice [REDACTED]",
    ),
    SecretCase(
        "xtrace_nested_sudo_isql",
        "deploy.sh:\n+ cd /srv\n++ sudo -u app isql MYDSN alice hunter2_xts\nok",
        "hunter2_xts",
        "deploy.sh:\n+ cd /srv\n++ sudo -u app isql MYDSN alice [REDACTED]\nok",
    ),
    SecretCase(
        "xtrace_mysql",
        "++ mysql -u root -phunter2_xtm -h db",
        "hunter2_xtm",
        "++ mysql -u root -p[REDACTED] -h db",
    ),
    SecretCase(
        "xtrace_sshpass",
        "+ sshpass -p hunter2_xtp ssh host",
        "hunter2_xtp",
        "+ sshpass -p [REDACTED] ssh host",
    ),
    SecretCase(
        "xtrace_vault_login_extra",
        "+++ vault login hunter2_xtv extra",
        "hunter2_xtv",
        "+++ vault login [REDACTED] [REDACTED]",
        redactions=2,
    ),
    # the ldap tools' short flags clustered: a run of switches ending in -w (ldappasswd: -a, -s)
    SecretCase(
        "ldapsearch_clustered_xw",
        "ldapsearch -xw hunter2_lcx -D cn=admin,dc=x -b dc=x",
        "hunter2_lcx",
        "ldapsearch -xw [REDACTED] -D cn=admin,dc=x -b dc=x",
    ),
    SecretCase(
        "ldapmodify_clustered_zzxw",
        "ldapmodify -ZZxw hunter2_lcz -D cn=admin,dc=x -f change.ldif",
        "hunter2_lcz",
        "ldapmodify -ZZxw [REDACTED] -D cn=admin,dc=x -f change.ldif",
    ),
    SecretCase(
        "ldapwhoami_x_w", "ldapwhoami -x -w hunter2_lcw", "hunter2_lcw", "ldapwhoami -x -w [REDACTED]"
    ),
    SecretCase(
        "ldapdelete_clustered_attached",
        "ldapdelete -xwhunter2_lca cn=old,dc=x",
        "hunter2_lca",
        "ldapdelete -xw[REDACTED] cn=old,dc=x",
    ),
    SecretCase(
        "ldappasswd_clustered",
        "ldappasswd -ZZxw hunter2_lpx -D cn=admin,dc=x -xs hunter2_lpy uid=bob,dc=x",
        "hunter2_lp",
        "ldappasswd -ZZxw [REDACTED] -D cn=admin,dc=x -xs [REDACTED] uid=bob,dc=x",
        redactions=2,
    ),
    # sshpass -e reads the password from the SSHPASS variable
    SecretCase(
        "sshpass_env_var",
        "SSHPASS=hunter2_spe sshpass -e ssh deploy@web-1 uptime",
        "hunter2_spe",
        "SSHPASS=[REDACTED] sshpass -e ssh deploy@web-1 uptime",
    ),
    SecretCase(
        "env_sshpass_env_var",
        "env SSHPASS=hunter2_spf sshpass -e scp a web-1:",
        "hunter2_spf",
        "env SSHPASS=[REDACTED] sshpass -e scp a web-1:",
    ),
    SecretCase("export_sshpass", "export SSHPASS=hunter2_spg", "hunter2_spg", "export SSHPASS=[REDACTED]"),
    # vault login TOKEN in the middle of a line with more words after it: a token's shape
    SecretCase(
        "vault_login_legacy_token_mid_line",
        "2026-11-20T10:00:00Z ran: vault login s.AbCdEf1234567890xyz -method=token now",
        "s.AbCdEf1234567890xyz",
        "2026-11-20T10:00:00Z ran: vault login [REDACTED] -method=token now",
    ),
    SecretCase(
        "vault_login_hvs_token_mid_line",
        f"deploy: vault login {VAULT} extra words",
        VAULT[4:],
        "deploy: vault login hvs.[REDACTED] extra words",
    ),
    SecretCase(
        "vault_login_uuid_token_mid_line",
        "ci: vault login 3f2b8c1e-9d4a-4e6b-8a7c-1d2e3f4a5b6c -no-print then terraform apply",
        "3f2b8c1e-9d4a-4e6b-8a7c-1d2e3f4a5b6c",
        "ci: vault login [REDACTED] -no-print then terraform apply",
    ),
    SecretCase(
        "vault_login_token_pair",
        "vault login token=hunter2_vtp",
        "hunter2_vtp",
        "vault login token=[REDACTED]",
    ),
    SecretCase(
        "vault_login_legacy_token",
        "vault login s.Qf1s5zigZ4yX6akYjyp2Afsr",
        "s.Qf1s5zigZ4yX6akYjyp2Afsr",
        "vault login [REDACTED]",
    ),
    # a separator glued to a secret ends its command: the secret is the last item, not a user
    # before a password ("AUTH PW; echo" is no "AUTH USER PW"); the glued ";" may go with it
    SecretCase(
        "redis_cli_auth_glued_semicolon",
        "redis-cli -h cache AUTH hunter2_rcs; echo done",
        "hunter2_rcs",
        "redis-cli -h cache AUTH [REDACTED] [REDACTED] done",  # "echo" read as a password after
        redactions=2,
    ),
    SecretCase(
        "vault_login_glued_semicolon_mid_line",
        "ran: vault login hunter2_vl7; vault status",
        "hunter2_vl7",
        "ran: vault login [REDACTED] vault status",
    ),
    SecretCase(
        "vault_login_glued_and_mid_line",
        "ran: vault login hunter2_vl8&& vault status",
        "hunter2_vl8",
        "ran: vault login [REDACTED] vault status",
    ),
    # LDAP client and server config directives, a blank between name and value (nslcd.conf,
    # pam_ldap.conf / libnss-ldap.conf, slapd.conf): nslcd and pam_ldap read the rest of the line
    SecretCase(
        "nslcd_conf_bindpw",
        "uri ldap://ldap.example.com/\nbase dc=example,dc=com\nbinddn cn=nslcd,dc=example,dc=com\n"
        "bindpw hunter2_nsb\n",
        "hunter2_nsb",
        "uri ldap://ldap.example.com/\nbase dc=example,dc=com\nbinddn cn=nslcd,dc=example,dc=com\n"
        "bindpw [REDACTED]\n",
    ),
    SecretCase(
        "nslcd_conf_rootpwmodpw",
        "rootpwmoddn cn=admin,dc=example,dc=com\nrootpwmodpw hunter2_nsr\n",
        "hunter2_nsr",
        "rootpwmoddn cn=admin,dc=example,dc=com\nrootpwmodpw [REDACTED]\n",
    ),
    SecretCase(
        "nslcd_conf_bindpw_with_blanks",
        "bindpw hunter2 nsw words  \nbase dc=x",
        "hunter2 nsw words",
        "bindpw [REDACTED]  \nbase dc=x",
    ),
    SecretCase(
        "pam_ldap_conf_bindpw_tab",
        "host ldap.example.com\nbinddn cn=proxy,dc=example,dc=com\nbindpw\thunter2_plb\npam_password exop\n",
        "hunter2_plb",
        "host ldap.example.com\nbinddn cn=proxy,dc=example,dc=com\nbindpw\t[REDACTED]\npam_password exop\n",
    ),
    SecretCase(
        "slapd_conf_rootpw",
        'database mdb\nsuffix "dc=example,dc=com"\nrootdn "cn=admin,dc=example,dc=com"\nrootpw hunter2_slr\n',
        "hunter2_slr",
        'database mdb\nsuffix "dc=example,dc=com"\nrootdn "cn=admin,dc=example,dc=com"\nrootpw [REDACTED]\n',
    ),
    # a hash is hidden too: it can be cracked offline
    SecretCase(
        "slapd_conf_rootpw_ssha",
        "rootdn cn=admin,dc=x\nrootpw {SSHA}hunter2Q7ZxSshaHashAb12Cd34=\ndirectory /var/lib/ldap",
        "{SSHA}hunter2Q7ZxSshaHashAb12Cd34=",
        "rootdn cn=admin,dc=x\nrootpw [REDACTED]\ndirectory /var/lib/ldap",
    ),
    SecretCase(
        "slapd_conf_rootpw_indented_tab",
        "database\tmdb\n\trootpw\t{SSHA}hunter2Q7ZxIndentedHash99=\n",
        "hunter2Q7ZxIndentedHash99=",
        "database\tmdb\n\trootpw\t[REDACTED]\n",
    ),
    SecretCase(
        "nslcd_conf_bindpw_indented",
        "  bindpw   hunter2_nsi\n",
        "hunter2_nsi",
        "  bindpw   [REDACTED]\n",
    ),
    SecretCase(
        "slapd_conf_rootpw_quoted",
        'rootpw "hunter2 slq"\n',
        "hunter2 slq",
        'rootpw "[REDACTED]"\n',
    ),
    # a kickstart file (anaconda-ks.cfg): rootpw [--iscrypted|--plaintext] PASSWORD
    SecretCase(
        "kickstart_rootpw_iscrypted",
        "lang en_US.UTF-8\nrootpw --iscrypted $6$hunter2salt$Q7ZxKickstartHashValue0\ntimezone UTC",
        "$6$hunter2salt$Q7ZxKickstartHashValue0",
        "lang en_US.UTF-8\nrootpw --iscrypted [REDACTED]\ntimezone UTC",
    ),
    # slapd's cn=config (olcRootPW) and an LDIF's userPassword: a {SCHEME} hash, commas and all
    SecretCase(
        "ldif_olcrootpw_ssha",
        "dn: olcDatabase={1}mdb,cn=config\nolcRootPW: {SSHA}hunter2Q7ZxOlcHash55=\nolcSuffix: dc=x\n",
        "hunter2Q7ZxOlcHash55=",
        "dn: olcDatabase={1}mdb,cn=config\nolcRootPW: [REDACTED]\nolcSuffix: dc=x\n",
    ),
    SecretCase(
        "ldif_userpassword_argon2",
        "dn: uid=bob,dc=x\nuserPassword: {ARGON2}$argon2id$v=19$m=65536,t=2,p=1$c2FsdA$hunter2Q7ZxArgon\n",
        "hunter2Q7ZxArgon",
        "dn: uid=bob,dc=x\nuserPassword: [REDACTED]\n",
    ),
    # the same names with "=" or ":" (Salt/hiera/Ansible variables): secret words, like requirepass
    SecretCase("yaml_bindpw", "nslcd:\n  binddn: cn=x\n  bindpw: hunter2_ymb\n", "hunter2_ymb"),
    SecretCase(
        "ansible_nslcd_bindpw", "nslcd_bindpw: 'hunter2_anb'", "hunter2_anb", "nslcd_bindpw: '[REDACTED]'"
    ),
    # etcdctl reads user:password from ETCDCTL_USER, as from --user: the user stays
    SecretCase(
        "etcdctl_user_env",
        "ETCDCTL_USER=root:hunter2_ecu etcdctl get /k",
        "hunter2_ecu",
        "ETCDCTL_USER=root:[REDACTED] etcdctl get /k",
    ),
    SecretCase(
        "export_etcdctl_user",
        "export ETCDCTL_USER=root:hunter2_ece",
        "hunter2_ece",
        "export ETCDCTL_USER=root:[REDACTED]",
    ),
    SecretCase(
        "export_etcdctl_user_quoted",
        'export ETCDCTL_USER="root:hunter2_ecq"',
        "hunter2_ecq",
        'export ETCDCTL_USER="root:[REDACTED]"',
    ),
    # xtrace after a CI log's timestamp (GitHub Actions, Jenkins' timestamper) and zsh's xtrace
    # (PS4 '+%N:%i> ': the script or function and the line number)
    SecretCase(
        "xtrace_after_iso_timestamp_isql",
        "2024-05-01T10:00:00.123Z + isql MyDSN bob hunter2_xiz",
        "hunter2_xiz",
        "2024-05-01T10:00:00.123Z + isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "xtrace_github_actions_isql",
        "2024-05-01T10:00:00.1234567Z ++ isql MyDSN bob hunter2_xga",
        "hunter2_xga",
        "2024-05-01T10:00:00.1234567Z ++ isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "xtrace_github_actions_mysql",
        "2024-05-01T10:00:00.1234567Z ++ mysql -u root -phunter2_xgm",
        "hunter2_xgm",
        "2024-05-01T10:00:00.1234567Z ++ mysql -u root -p[REDACTED]",
    ),
    SecretCase(
        "xtrace_jenkins_timestamp_isql",
        "[2024-05-01T10:00:00.123Z] + isql MyDSN bob hunter2_xjt",
        "hunter2_xjt",
        "[2024-05-01T10:00:00.123Z] + isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "xtrace_zsh_isql",
        "+zsh:3> isql MyDSN bob hunter2_xzs",
        "hunter2_xzs",
        "+zsh:3> isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "xtrace_zsh_script_isql",
        "+/path/script.sh:12> isql MyDSN bob hunter2_xzp",
        "hunter2_xzp",
        "+/path/script.sh:12> isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "xtrace_zsh_function_sudo_isql",
        "+deploy:7> sudo -u app isql MyDSN bob hunter2_xzf",
        "hunter2_xzf",
        "+deploy:7> sudo -u app isql MyDSN bob [REDACTED]",
    ),
    # a command before a ";" glued to its last word: a known one (cd DIR, export NAME=VALUE ...)
    SecretCase(
        "isql_after_cd_semicolon",
        "cd /srv; isql MyDSN bob hunter2_cds",
        "hunter2_cds",
        "cd /srv; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_after_cd_glued_semicolon",
        "cd /srv;isql MyDSN bob hunter2_cdg",
        "hunter2_cdg",
        "cd /srv;isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_after_export_semicolon",
        "export ODBCINI=/etc/odbc.ini; isql MyDSN bob hunter2_exs",
        "hunter2_exs",
        "export ODBCINI=/etc/odbc.ini; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_crontab_cd_semicolon",
        "*/5 * * * * cd /srv/reports; isql MyDSN bob hunter2_crn < q.sql",
        "hunter2_crn",
        "*/5 * * * * cd /srv/reports; isql MyDSN bob [REDACTED] < q.sql",
    ),
    SecretCase(
        "isql_ps_sh_c_cd_semicolon",
        "root      1234     1  0 10:00 ?        00:00:00 sh -c cd /srv; isql MyDSN bob hunter2_shc",
        "hunter2_shc",
        "root      1234     1  0 10:00 ?        00:00:00 sh -c cd /srv; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_after_dot_profile_semicolon",
        ". /etc/profile; sudo -u app isql MyDSN bob hunter2_dot",
        "hunter2_dot",
        ". /etc/profile; sudo -u app isql MyDSN bob [REDACTED]",
    ),
    # an LDIF value in base64 after "::" (ldapsearch and slapcat print userPassword so, and any
    # value starting with "{" or not ASCII): hidden whole, with the lines it is folded onto
    SecretCase(
        "ldif_userpassword_base64",
        "dn: uid=bob,dc=example,dc=com\nuserPassword:: e1NTSEF9aHVudGVyMlE3WnhMZGlmQjY0PQ==\nmail: bob@x\n",
        "e1NTSEF9aHVudGVyMlE3WnhMZGlmQjY0PQ==",
        "dn: uid=bob,dc=example,dc=com\nuserPassword:: [REDACTED]\nmail: bob@x\n",
    ),
    SecretCase(
        "ldif_olcrootpw_base64",
        "dn: olcDatabase={1}mdb,cn=config\nolcRootPW:: e1NTSEF9aHVudGVyMlE3WnhPbGNCNjRSb290PQ==\n",
        "e1NTSEF9aHVudGVyMlE3WnhPbGNCNjRSb290PQ==",
        "dn: olcDatabase={1}mdb,cn=config\nolcRootPW:: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_sambantpassword_base64",
        "sambaSID: S-1-5-21-1-2-3-1104\nsambaNTPassword:: ODg0NkY3RUFFRThGQjExN0FEMDZCREQ4MzBCNzU4NkM=\n",
        "ODg0NkY3RUFFRThGQjExN0FEMDZCREQ4MzBCNzU4NkM=",
        "sambaSID: S-1-5-21-1-2-3-1104\nsambaNTPassword:: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_userpassword_base64_folded",
        "dn: uid=amy,dc=x\n"
        "userPassword:: e1NTSEE1MTJ9aHVudGVyMlE3WnhGb2xkZWRTc2hhNTEyTGRpZlZhbHVlVGhhd\n"
        " ElzTG9uZ0Vub3VnaFRvV3JhcEF0NzZDb2x1bW5zPT0=\n"
        "uid: amy\n",
        "ElzTG9uZ0Vub3VnaFRvV3JhcEF0NzZDb2x1bW5zPT0=",
        "dn: uid=amy,dc=x\nuserPassword:: [REDACTED]\nuid: amy\n",
    ),
    SecretCase(
        "ldif_in_yaml_block_base64",
        "data:\n  users.ldif: |\n    dn: uid=bob,dc=x\n"
        "    userPassword:: e1NTSEF9aHVudGVyMlE3WnhMZGlmQjY0PQ==\n",
        "e1NTSEF9aHVudGVyMlE3WnhMZGlmQjY0PQ==",
        "data:\n  users.ldif: |\n    dn: uid=bob,dc=x\n    userPassword:: [REDACTED]\n",
    ),
    # a {SCHEME} hash ldapsearch folds at 76 columns: the line it goes on to starts with a blank
    SecretCase(
        "ldif_olcrootpw_argon2_folded",
        "olcRootPW: {ARGON2}$argon2id$v=19$m=65536,t=2,p=1$c2FsdHNhbHQ$hunter2Q7ZxF\n"
        " oldedArgonHashTail\nolcSuffix: dc=x\n",
        "oldedArgonHashTail",
        "olcRootPW: [REDACTED]\nolcSuffix: dc=x\n",
    ),
    # sssd.conf's ldap_default_authtok (its _type stays: a kind of token, not one)
    SecretCase(
        "sssd_conf_ldap_default_authtok",
        "[domain/example.com]\nid_provider = ldap\nldap_default_bind_dn = cn=sssd,dc=example,dc=com\n"
        "ldap_default_authtok_type = password\nldap_default_authtok = hunter2_sss\n",
        "hunter2_sss",
        "[domain/example.com]\nid_provider = ldap\nldap_default_bind_dn = cn=sssd,dc=example,dc=com\n"
        "ldap_default_authtok_type = password\nldap_default_authtok = [REDACTED]\n",
    ),
    SecretCase(
        "sssd_conf_obfuscated_authtok",
        "ldap_default_authtok_type = obfuscated_password\n"
        "ldap_default_authtok = AAAQAHunter2Q7ZxObfuscated\n",
        "AAAQAHunter2Q7ZxObfuscated",
        "ldap_default_authtok_type = obfuscated_password\nldap_default_authtok = [REDACTED]\n",
    ),
    # a directive commented out still holds a password: "#bindpw PW", "# rootpw PW"
    SecretCase(
        "nslcd_conf_commented_bindpw",
        "# The credentials to bind with.\n# Optional: default is no credentials.\n#bindpw hunter2_ncb\n",
        "hunter2_ncb",
        "# The credentials to bind with.\n# Optional: default is no credentials.\n#bindpw [REDACTED]\n",
    ),
    SecretCase(
        "slapd_conf_commented_rootpw",
        'rootdn "cn=admin,dc=x"\n# rootpw hunter2_scr\n',
        "hunter2_scr",
        'rootdn "cn=admin,dc=x"\n# rootpw [REDACTED]\n',
    ),
    SecretCase(
        "redis_conf_commented_requirepass",
        "# requirepass foobared\n#requirepass hunter2_rcq\n",
        "hunter2_rcq",
        "# requirepass [REDACTED]\n#requirepass [REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "redis_conf_commented_masterauth",
        "# masterauth hunter2_rcm\n",
        "hunter2_rcm",
        "# masterauth [REDACTED]\n",
    ),
    # nslcd reads its keywords in any case; nss-ldapd (nslcd's first name) read rootbindpw too
    SecretCase("nslcd_conf_bindpw_upper", "BINDPW hunter2_nbu\n", "hunter2_nbu", "BINDPW [REDACTED]\n"),
    SecretCase(
        "nslcd_conf_bindpw_mixed_case",
        "BindDN cn=nslcd,dc=x\nBindPW hunter2_nbm\n",
        "hunter2_nbm",
        "BindDN cn=nslcd,dc=x\nBindPW [REDACTED]\n",
    ),
    SecretCase(
        "nslcd_conf_rootpwmodpw_upper",
        "ROOTPWMODPW hunter2_nru\n",
        "hunter2_nru",
        "ROOTPWMODPW [REDACTED]\n",
    ),
    SecretCase(
        "nss_ldapd_rootbindpw",
        "rootbinddn cn=admin,dc=x\nrootbindpw hunter2_nrb\n",
        "hunter2_nrb",
        "rootbinddn cn=admin,dc=x\nrootbindpw [REDACTED]\n",
    ),
    SecretCase(
        "nss_ldapd_rootbindpw_assigned",
        "ldap_rootbindpw = hunter2_nra",
        "hunter2_nra",
        "ldap_rootbindpw = [REDACTED]",
    ),
    # a line of `history` ("%5d%c %s%s": the number in five columns, "*" after a modified entry,
    # then HISTTIMEFORMAT's time when set); zsh's history -i likewise
    SecretCase(
        "history_timestamp_isql",
        "  501  2024-05-01 10:00:00 isql MyDSN bob hunter2_hts",
        "hunter2_hts",
        "  501  2024-05-01 10:00:00 isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "history_plain_isql",
        "  500  cd /srv\n  501  isql MyDSN bob hunter2_hpl\n",
        "hunter2_hpl",
        "  500  cd /srv\n  501  isql MyDSN bob [REDACTED]\n",
    ),
    SecretCase(
        "history_modified_isql",
        "  501* isql MyDSN bob hunter2_hmo",
        "hunter2_hmo",
        "  501* isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "history_day_month_timestamp_isql",
        " 1032  03/03/19 01:06:00 sudo -u app isql MyDSN bob hunter2_hdm",
        "hunter2_hdm",
        " 1032  03/03/19 01:06:00 sudo -u app isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "zsh_history_i_isql",
        "  501  2024-05-01 10:00  isql MyDSN bob hunter2_hzi",
        "hunter2_hzi",
        "  501  2024-05-01 10:00  isql MyDSN bob [REDACTED]",
    ),
    # a command without arguments (or echo's words) before a ";" glued to it, at a command's start
    SecretCase(
        "isql_after_date_semicolon",
        "date; isql MyDSN bob hunter2_dts",
        "hunter2_dts",
        "date; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_after_echo_semicolon",
        "echo start; isql MyDSN bob hunter2_ech",
        "hunter2_ech",
        "echo start; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_after_cd_ls_semicolons",
        "cd /srv; ls; isql MyDSN bob hunter2_cls",
        "hunter2_cls",
        "cd /srv; ls; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_xtrace_after_echo_quoted_semicolon",
        "+ echo 'starting report; step 1'; isql MyDSN bob hunter2_eqs",
        "hunter2_eqs",
        "+ echo 'starting report; step 1'; isql MyDSN bob [REDACTED]",
    ),
    # debconf answers (debconf-get-selections prints them, a preseed file and debconf-set-selections
    # read them): OWNER QUESTION TYPE VALUE; the type "password" makes the value secret, whatever
    # the question is called
    SecretCase(
        "debconf_get_selections_mysql_root_password",
        '# New password for the MySQL "root" user:\n'
        "mysql-server-8.0\tmysql-server/root_password\tpassword\thunter2_dgs\n"
        '# Repeat password for the MySQL "root" user:\n'
        "mysql-server-8.0\tmysql-server/root_password_again\tpassword\thunter2_dgs\n",
        "hunter2_dgs",
        '# New password for the MySQL "root" user:\n'
        "mysql-server-8.0\tmysql-server/root_password\tpassword\t[REDACTED]\n"
        '# Repeat password for the MySQL "root" user:\n'
        "mysql-server-8.0\tmysql-server/root_password_again\tpassword\t[REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "preseed_root_password",
        "d-i passwd/root-login boolean true\nd-i passwd/root-password password hunter2_dpr\n"
        "d-i passwd/root-password-again password hunter2_dpr\n",
        "hunter2_dpr",
        "d-i passwd/root-login boolean true\nd-i passwd/root-password password [REDACTED]\n"
        "d-i passwd/root-password-again password [REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "preseed_user_password_crypted",
        "d-i passwd/user-fullname string Bob Smith\nd-i passwd/username string bob\n"
        "d-i passwd/user-password-crypted password $6$rounds=4096$saltsalt$hunter2Q7ZxCrypted\n",
        "hunter2Q7ZxCrypted",
        "d-i passwd/user-fullname string Bob Smith\nd-i passwd/username string bob\n"
        "d-i passwd/user-password-crypted password [REDACTED]\n",
    ),
    SecretCase(
        "preseed_ldap_auth_config_rootbindpw",
        "ldap-auth-config ldap-auth-config/rootbinddn string cn=admin,dc=x\n"
        "ldap-auth-config ldap-auth-config/rootbindpw password hunter2_lac\n",
        "hunter2_lac",
        "ldap-auth-config ldap-auth-config/rootbinddn string cn=admin,dc=x\n"
        "ldap-auth-config ldap-auth-config/rootbindpw password [REDACTED]\n",
    ),
    SecretCase(
        "preseed_password_with_blanks",
        "d-i passwd/root-password password correct horse hunter2_dsp  \n",
        "hunter2_dsp",
        "d-i passwd/root-password password [REDACTED]  \n",
    ),
    SecretCase(
        "preseed_commented_out_root_password",
        "# Root password, either in clear text\n#d-i passwd/root-password password hunter2_dcm\n",
        "hunter2_dcm",
        "# Root password, either in clear text\n#d-i passwd/root-password password [REDACTED]\n",
    ),
    SecretCase(
        "debconf_heredoc_slapd_password",
        "cat <<EOF | debconf-set-selections\n  slapd  slapd/password1  password  hunter2_shd\nEOF\n",
        "hunter2_shd",
        "cat <<EOF | debconf-set-selections\n  slapd  slapd/password1  password  [REDACTED]\nEOF\n",
    ),
    SecretCase(
        "debconf_set_selections_here_string",
        "debconf-set-selections <<< 'mysql-server mysql-server/root_password password hunter2_dhs'",
        "hunter2_dhs",
        "debconf-set-selections <<< 'mysql-server mysql-server/root_password password [REDACTED]'",
    ),
    SecretCase(
        "dockerfile_echo_debconf_set_selections",
        'RUN echo "mysql-server mysql-server/root_password password hunter2_dep" '
        "| debconf-set-selections \\\n"
        '    && echo "mysql-server mysql-server/root_password_again password hunter2_dep" '
        "| debconf-set-selections",
        "hunter2_dep",
        'RUN echo "mysql-server mysql-server/root_password password [REDACTED]" '
        "| debconf-set-selections \\\n"
        '    && echo "mysql-server mysql-server/root_password_again password [REDACTED]" '
        "| debconf-set-selections",
        redactions=2,
    ),
    SecretCase(
        "echo_unquoted_debconf_set_selections",
        "echo phpmyadmin phpmyadmin/mysql/admin-pass password hunter2_deu | sudo debconf-set-selections",
        "hunter2_deu",
        "echo phpmyadmin phpmyadmin/mysql/admin-pass password [REDACTED] | sudo debconf-set-selections",
    ),
    # debconf's own database (/var/cache/debconf/passwords.dat): a record per question, its Value
    # hidden when the question's name (after its owner's "package/") or template's is a secret name
    SecretCase(
        "debconf_passwords_dat",
        "Name: mysql-server/root_password\nTemplate: mysql-server/root_password\nValue: hunter2_pdt\n"
        "Owners: mysql-server-8.0\nFlags: seen\n\n"
        "Name: mysql-server/root_password_again\nTemplate: mysql-server/root_password_again\n"
        "Value: hunter2_pdt\nOwners: mysql-server-8.0\nFlags: seen\n",
        "hunter2_pdt",
        "Name: mysql-server/root_password\nTemplate: mysql-server/root_password\nValue: [REDACTED]\n"
        "Owners: mysql-server-8.0\nFlags: seen\n\n"
        "Name: mysql-server/root_password_again\nTemplate: mysql-server/root_password_again\n"
        "Value: [REDACTED]\nOwners: mysql-server-8.0\nFlags: seen\n",
        redactions=2,
    ),
    SecretCase(
        "debconf_passwords_dat_slapd_adminpw",
        "Name: slapd/internal/adminpw\nTemplate: slapd/internal/adminpw\nValue: hunter2_sia\nOwners: slapd\n",
        "hunter2_sia",
        "Name: slapd/internal/adminpw\nTemplate: slapd/internal/adminpw\nValue: [REDACTED]\nOwners: slapd\n",
    ),
    SecretCase(
        "debconf_passwords_dat_crlf",
        "Name: passwd/root-password\r\nTemplate: passwd/root-password\r\nValue: hunter2_pcr\r\n",
        "hunter2_pcr",
        "Name: passwd/root-password\r\nTemplate: passwd/root-password\r\nValue: [REDACTED]\r\n",
    ),
    # directives commented out in other styles: two blanks, "##", an ini file's ";"
    SecretCase(
        "nslcd_conf_commented_bindpw_two_blanks",
        "#  bindpw hunter2_c2b\n",
        "hunter2_c2b",
        "#  bindpw [REDACTED]\n",
    ),
    SecretCase(
        "pam_ldap_conf_double_hash_bindpw",
        "## bindpw hunter2_dhb\n",
        "hunter2_dhb",
        "## bindpw [REDACTED]\n",
    ),
    SecretCase(
        "ini_semicolon_bindpw",
        "[ldap]\n;bindpw hunter2_isb\n; rootbindpw hunter2_isb\n",
        "hunter2_isb",
        "[ldap]\n;bindpw [REDACTED]\n; rootbindpw [REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "redis_conf_commented_requirepass_two_blanks",
        "#  requirepass hunter2_c2r\n;masterauth hunter2_c2r\n",
        "hunter2_c2r",
        "#  requirepass [REDACTED]\n;masterauth [REDACTED]\n",
        redactions=2,
    ),
    # `fc -l`: the number, a TAB, then " " or "*" (an entry modified since); history's time as
    # HISTTIMEFORMAT="%s " or "%b %d %H:%M " prints it
    SecretCase(
        "fc_l_isql",
        "4\t cd /srv\n5\t isql MyDSN bob hunter2_fcl\n",
        "hunter2_fcl",
        "4\t cd /srv\n5\t isql MyDSN bob [REDACTED]\n",
    ),
    SecretCase(
        "fc_l_modified_isql",
        "501\t*isql MyDSN bob hunter2_fcm",
        "hunter2_fcm",
        "501\t*isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "fc_ln_isql",
        "\t cd /srv\n\t isql MyDSN bob hunter2_fcn\n",
        "hunter2_fcn",
        "\t cd /srv\n\t isql MyDSN bob [REDACTED]\n",
    ),
    SecretCase(
        "history_epoch_isql",
        "  501  1714557600 isql MyDSN bob hunter2_hep",
        "hunter2_hep",
        "  501  1714557600 isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "history_month_name_isql",
        "  501  May 01 10:00 isql MyDSN bob hunter2_hmn",
        "hunter2_hmn",
        "  501  May 01 10:00 isql MyDSN bob [REDACTED]",
    ),
    # Kerberos keys in LDAP: MIT's krbPrincipalKey (each principal's keys), krbMKey (the realm's
    # master key), krbPwdHistory (old keys); Heimdal's krb5Key; Samba's hashes
    SecretCase(
        "ldif_krbprincipalkey_base64_folded",
        "dn: krbPrincipalName=bob@EXAMPLE.COM,cn=EXAMPLE.COM,cn=krbContainer,dc=x\n"
        "krbPrincipalName: bob@EXAMPLE.COM\n"
        "krbPrincipalKey:: MIGwoAMCAQGhAwIBAaIDAgEBo4GeMIGbMGegAwIBAKFgMF6gAwIBEqFXBFUgAGh1bnRlcjJ\n"
        " RN1p4S3JiUHJpbmNpcGFsS2V5Rm9sZGVk\n"
        "krbLastPwdChange: 20240501100000Z\n",
        "RN1p4S3JiUHJpbmNpcGFsS2V5Rm9sZGVk",
        "dn: krbPrincipalName=bob@EXAMPLE.COM,cn=EXAMPLE.COM,cn=krbContainer,dc=x\n"
        "krbPrincipalName: bob@EXAMPLE.COM\n"
        "krbPrincipalKey:: [REDACTED]\n"
        "krbLastPwdChange: 20240501100000Z\n",
    ),
    SecretCase(
        "krbprincipalkey_one_colon",
        "krbPrincipalKey: MIGwoAMCAQGhAwIBAaIDAgEBhunter2Q7ZxPlain\n",
        "MIGwoAMCAQGhAwIBAaIDAgEBhunter2Q7ZxPlain",
        "krbPrincipalKey: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_krbmkey_base64",
        "dn: cn=EXAMPLE.COM,cn=krbContainer,dc=x\nkrbMKey:: MEigAwIBAKFBMD+gAwIBEqE4BDYgAGh1bnRlcjJNS2V5\n",
        "MEigAwIBAKFBMD+gAwIBEqE4BDYgAGh1bnRlcjJNS2V5",
        "dn: cn=EXAMPLE.COM,cn=krbContainer,dc=x\nkrbMKey:: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_krbpwdhistory_base64",
        "krbPwdHistory:: MIGwoAMCAQGhAwIBAaIDAgEBaHVudGVyMlB3ZEhpc3Q=\n",
        "MIGwoAMCAQGhAwIBAaIDAgEBaHVudGVyMlB3ZEhpc3Q=",
        "krbPwdHistory:: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_heimdal_krb5key",
        "krb5PrincipalName: bob@EXAMPLE.COM\nkrb5KeyVersionNumber: 2\n"
        "krb5Key:: MCehAwIBAaIgBB5odW50ZXIyS3JiNUtleQ==\n",
        "MCehAwIBAaIgBB5odW50ZXIyS3JiNUtleQ==",
        "krb5PrincipalName: bob@EXAMPLE.COM\nkrb5KeyVersionNumber: 2\nkrb5Key:: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_ppolicy_pwdhistory",
        "pwdChangedTime: 20240501100000Z\n"
        "pwdHistory: 20240501100000Z#1.3.6.1.4.1.1466.115.121.1.40#38#{SSHA}hunter2HashQ7Zx\n",
        "hunter2HashQ7Zx",
        "pwdChangedTime: 20240501100000Z\npwdHistory: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_userpkcs12_base64",
        "cn: Bob\nuserPKCS12:: MIIJQQIBAzCCCQcGCSqGSIb3DQEHAaCCCPgEggj0hunter2P12\n",
        "MIIJQQIBAzCCCQcGCSqGSIb3DQEHAaCCCPgEggj0hunter2P12",
        "cn: Bob\nuserPKCS12:: [REDACTED]\n",
    ),
    SecretCase(
        "ldif_samba_lm_nt_passwords",
        "sambaLMPassword: 552902031BEDE9EFAAD3B435B51404EE\n"
        "sambaNTPassword: 878D8014606CDA29677A44EFA1353FC7\n"
        "sambaPwdLastSet: 1714557600\n",
        "878D8014606CDA29677A44EFA1353FC7",
        "sambaLMPassword: [REDACTED]\nsambaNTPassword: [REDACTED]\nsambaPwdLastSet: 1714557600\n",
        redactions=2,
    ),
    SecretCase(
        "ldif_samba_password_history",
        "sambaPasswordHistory: 5AB2C9D0E1F2031425364758697A8B9C8846F7EAEE8FB117AD06BDD830B7586C\n",
        "5AB2C9D0E1F2031425364758697A8B9C8846F7EAEE8FB117AD06BDD830B7586C",
        "sambaPasswordHistory: [REDACTED]\n",
    ),
    # a command with arguments before a ";" glued to its last word, or after a shell keyword: the
    # command after it ends with its password
    SecretCase(
        "isql_after_cat_semicolon",
        "cat /etc/odbc.ini; isql MyDSN bob hunter2_cat",
        "hunter2_cat",
        "cat /etc/odbc.ini; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_after_echo_words_semicolon",
        "echo connecting to MyDSN; isql MyDSN bob hunter2_ecw",
        "hunter2_ecw",
        "echo connecting to MyDSN; isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_after_grep_semicolon_redirected",
        "grep -q MyDSN /etc/odbc.ini; isql -b MyDSN bob hunter2_grp < report.sql > out.csv",
        "hunter2_grp",
        "grep -q MyDSN /etc/odbc.ini; isql -b MyDSN bob [REDACTED] < report.sql > out.csv",
    ),
    SecretCase(
        "isql_sudo_after_systemctl_semicolon",
        "systemctl restart odbc-bridge;sudo -u app isql MyDSN bob hunter2_sys",
        "hunter2_sys",
        "systemctl restart odbc-bridge;sudo -u app isql MyDSN bob [REDACTED]",
    ),
    SecretCase(
        "isql_one_line_if_then",
        "if test -f /etc/odbc.ini; then isql MyDSN bob hunter2_ift; fi",
        "hunter2_ift",
    ),
    SecretCase(
        "mysql_after_sleep_semicolon",
        "sleep 5; mysql -uroot -phunter2_slp",
        "hunter2_slp",
        "sleep 5; mysql -uroot -p[REDACTED]",
    ),
    # an indented command in a script or a CI file's block
    SecretCase(
        "isql_indented_in_if_block",
        "if true; then\n  isql MyDSN bob hunter2_ind\nfi\n",
        "hunter2_ind",
        "if true; then\n  isql MyDSN bob [REDACTED]\nfi\n",
    ),
    SecretCase(
        "isql_indented_in_ci_run_block",
        "steps:\n  - name: report\n    run: |\n      cd /srv/reports\n      isql -b MyDSN bob hunter2_ciy < q.sql\n",
        "hunter2_ciy",
        "steps:\n  - name: report\n    run: |\n      cd /srv/reports\n      isql -b MyDSN bob [REDACTED] < q.sql\n",
    ),
    SecretCase(
        "mysql_tab_indented",
        "backup() {\n\tmysql -u root -phunter2_tab shop\n}\n",
        "hunter2_tab",
        "backup() {\n\tmysql -u root -p[REDACTED] shop\n}\n",
    ),
    # a debconf password answer in any quoted string (printf's arguments or format, sh -c's script)
    SecretCase(
        "printf_debconf_set_selections",
        "printf '%s\\n' 'slapd slapd/password1 password hunter2_pfs' | debconf-set-selections",
        "hunter2_pfs",
        "printf '%s\\n' 'slapd slapd/password1 password [REDACTED]' | debconf-set-selections",
    ),
    SecretCase(
        "printf_format_debconf_set_selections",
        "printf 'mysql-server mysql-server/root_password password hunter2_pff\\n' | debconf-set-selections",
        "hunter2_pff",
        "printf 'mysql-server mysql-server/root_password password [REDACTED]\\n' | debconf-set-selections",
    ),
    SecretCase(
        "echo_debconf_root_password",
        'echo "mysql-server mysql-server/root_password password hunter2_edr" | debconf-set-selections',
        "hunter2_edr",
        'echo "mysql-server mysql-server/root_password password [REDACTED]" | debconf-set-selections',
    ),
    SecretCase(
        "sh_c_printf_debconf",
        "sh -c \"printf '%s\\n' 'ejabberd ejabberd/password password hunter2_shp' | debconf-set-selections\"",
        "hunter2_shp",
        "sh -c \"printf '%s\\n' 'ejabberd ejabberd/password password [REDACTED]' | debconf-set-selections\"",
    ),
    SecretCase(
        "debconf_answer_in_a_variable",
        "ANSWER='phpmyadmin phpmyadmin/mysql/app-pass password hunter2_dav'\n"
        'echo "$ANSWER" | debconf-set-selections',
        "hunter2_dav",
        "ANSWER='phpmyadmin phpmyadmin/mysql/app-pass password [REDACTED]'\n"
        'echo "$ANSWER" | debconf-set-selections',
    ),
    # passwords.dat records whose question's name holds no secret word: a confirmation question
    # (ejabberd/verify, nagios3/adminpassword-repeat), any question in a text naming the file
    SecretCase(
        "debconf_passwords_dat_verify",
        "Name: ejabberd/password\nTemplate: ejabberd/password\nValue: hunter2_ejv\nOwners: ejabberd\n"
        "Flags: seen\n\nName: ejabberd/verify\nTemplate: ejabberd/verify\nValue: hunter2_ejv\n"
        "Owners: ejabberd\nFlags: seen\n",
        "hunter2_ejv",
        "Name: ejabberd/password\nTemplate: ejabberd/password\nValue: [REDACTED]\nOwners: ejabberd\n"
        "Flags: seen\n\nName: ejabberd/verify\nTemplate: ejabberd/verify\nValue: [REDACTED]\n"
        "Owners: ejabberd\nFlags: seen\n",
        redactions=2,
    ),
    SecretCase(
        "debconf_passwords_dat_repeat",
        "Name: nagios3/adminpassword-repeat\nTemplate: nagios3/adminpassword-repeat\nValue: hunter2_nar\n",
        "hunter2_nar",
        "Name: nagios3/adminpassword-repeat\nTemplate: nagios3/adminpassword-repeat\nValue: [REDACTED]\n",
    ),
    SecretCase(
        "debconf_passwords_dat_named_by_head",
        "==> /var/cache/debconf/passwords.dat <==\nName: exampled/internal/generated\n"
        "Template: exampled/internal/generated\nValue: hunter2_pdh\nOwners: exampled\n",
        "hunter2_pdh",
        "==> /var/cache/debconf/passwords.dat <==\nName: exampled/internal/generated\n"
        "Template: exampled/internal/generated\nValue: [REDACTED]\nOwners: exampled\n",
    ),
    # a commented-out requirepass or masterauth with more words after its value (a note)
    SecretCase(
        "redis_conf_commented_requirepass_with_a_note",
        "# requirepass hunter2_rqn old\n#masterauth hunter2_rqn was rotated in May\n",
        "hunter2_rqn",
        "# requirepass [REDACTED] old\n#masterauth [REDACTED] was rotated in May\n",
        redactions=2,
    ),
    # --- Wi-Fi keys: wpa_supplicant, hostapd, ifupdown, NetworkManager
    SecretCase(
        "wpa_supplicant_psk_quoted",
        'network={\n\tssid="HomeNet"\n\tpsk="WifiPassw0rd123"\n\tkey_mgmt=WPA-PSK\n}\n',
        "WifiPassw0rd123",
        'network={\n\tssid="HomeNet"\n\tpsk="[REDACTED]"\n\tkey_mgmt=WPA-PSK\n}\n',
    ),
    SecretCase(
        "wpa_supplicant_psk_hex",
        'network={\n\tssid="Office"\n\tpsk=7f9c2ba4e88f827d616045507605853ed73b8093f6efbc88eb1a6eacfa66ef26\n}',
        "7f9c2ba4e88f827d616045507605853ed73b8093f6efbc88eb1a6eacfa66ef26",
        'network={\n\tssid="Office"\n\tpsk=[REDACTED]\n}',
    ),
    SecretCase(
        "wpa_supplicant_wep_key",
        'network={\n\tssid="Legacy"\n\tkey_mgmt=NONE\n\twep_key0="WepKey12345ab"\n\twep_tx_keyidx=0\n}',
        "WepKey12345ab",
    ),
    SecretCase(
        "hostapd_wpa_psk",
        "interface=wlan0\nssid=GuestNet\nwpa=2\nwpa_psk=3fa8c2d1e0b94f7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b\n",
        "3fa8c2d1e0b94f7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b",
    ),
    SecretCase(
        "ifupdown_wpa_psk",
        "auto wlan0\niface wlan0 inet dhcp\n    wpa-ssid HomeNet\n    wpa-psk DebianWifi99\n",
        "DebianWifi99",
        "auto wlan0\niface wlan0 inet dhcp\n    wpa-ssid HomeNet\n    wpa-psk [REDACTED]\n",
    ),
    SecretCase(
        "ifupdown_wpa_psk_passphrase_with_blanks",
        "iface wlan1 inet dhcp\n\twpa-ssid Cafe\n\twpa-psk my wifi pass phrase  \n",
        "my wifi pass phrase",
        "iface wlan1 inet dhcp\n\twpa-ssid Cafe\n\twpa-psk [REDACTED]  \n",
    ),
    SecretCase(
        "ifupdown_wpa_password_commented_out",
        "iface wlan0 inet dhcp\n#   wpa-psk OldWifiPass1\n    wpa-password EapWifiPass2\n",
        "WifiPass",
        "iface wlan0 inet dhcp\n#   wpa-psk [REDACTED]\n    wpa-password [REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "networkmanager_keyfile_psk",
        "[wifi]\nmode=infrastructure\nssid=HomeNet\n\n[wifi-security]\nkey-mgmt=wpa-psk\npsk=NmKeyfilePass1\n",
        "NmKeyfilePass1",
        "[wifi]\nmode=infrastructure\nssid=HomeNet\n\n[wifi-security]\nkey-mgmt=wpa-psk\npsk=[REDACTED]\n",
    ),
    SecretCase(
        "nmcli_show_secrets_psk",
        "802-11-wireless.ssid:                   HomeNet\n"
        "802-11-wireless-security.key-mgmt:      wpa-psk\n"
        "802-11-wireless-security.psk:           NmcliPsk99\n"
        "802-11-wireless-security.psk-flags:     0 (none)\n",
        "NmcliPsk99",
        "802-11-wireless.ssid:                   HomeNet\n"
        "802-11-wireless-security.key-mgmt:      wpa-psk\n"
        "802-11-wireless-security.psk:           [REDACTED]\n"
        "802-11-wireless-security.psk-flags:     0 (none)\n",
    ),
    SecretCase(
        "nmcli_terse_eap_password",
        "802-1x.eap:peap\n802-1x.identity:alice\n802-1x.password:EapTerse1\n",
        "EapTerse1",
        "802-1x.eap:peap\n802-1x.identity:alice\n802-1x.password:[REDACTED]\n",
    ),
    # --- key blocks: OpenVPN's shared keys, RFC 4716 private keys, age keys
    SecretCase(
        "openvpn_static_key",
        f"#\n# 2048 bit OpenVPN static key\n#\n-----BEGIN OpenVPN Static key V1-----\n{OPENVPN_HEX}\n"
        "-----END OpenVPN Static key V1-----\n",
        "6b86b273ff34fce19d6b804eff5a3f57",
        "#\n# 2048 bit OpenVPN static key\n#\n[REDACTED]\n",
    ),
    SecretCase(
        "openvpn_inline_tls_crypt",
        f"remote vpn.example.com 1194\n<tls-crypt>\n-----BEGIN OpenVPN Static key V1-----\n{OPENVPN_HEX}\n"
        "-----END OpenVPN Static key V1-----\n</tls-crypt>\nkey-direction 1\n",
        "d4735e3a265e16eee03f59718b9b5d03",
        "remote vpn.example.com 1194\n<tls-crypt>\n[REDACTED]\n</tls-crypt>\nkey-direction 1\n",
    ),
    SecretCase(
        "openvpn_tls_crypt_v2_client_key",
        f"<tls-crypt-v2>\n-----BEGIN OpenVPN tls-crypt-v2 client key-----\n{TLS_CRYPT_V2_BODY}\n"
        "-----END OpenVPN tls-crypt-v2 client key-----\n</tls-crypt-v2>",
        TLS_CRYPT_V2_BODY,
        "<tls-crypt-v2>\n[REDACTED]\n</tls-crypt-v2>",
    ),
    SecretCase(
        "openvpn_static_key_cut_short",
        "head of ta.key: -----BEGIN OpenVPN Static key V1-----\n5feceb66ffc86f38d952786c6d696c79\n6b86b2…",
        "5feceb66ffc86f38d952786c6d696c79",
        "head of ta.key: [REDACTED]",
    ),
    SecretCase(
        "ssh2_encrypted_private_key",
        f'---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nComment: "rsa-key-20240501"\n{SSH2_BODY}\n'
        "---- END SSH2 ENCRYPTED PRIVATE KEY ----\n",
        SSH2_BODY,
        "[REDACTED]\n",
    ),
    SecretCase(
        "ssh2_private_key_in_json",
        f'{{"file": "id_rsa.ssh2", "text": "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\\n{SSH2_BODY}\\n'
        '---- END SSH2 ENCRYPTED PRIVATE KEY ----\\n"}',
        SSH2_BODY,
        '{"file": "id_rsa.ssh2", "text": "[REDACTED]\\n"}',
    ),
    SecretCase(
        "age_secret_key_file",
        f"==> /etc/sops/age/keys.txt <==\n# created: 2024-05-01T10:00:00Z\n{AGE_KEY}\n",
        AGE_KEY[16:],
        "==> /etc/sops/age/keys.txt <==\n# created: 2024-05-01T10:00:00Z\nAGE-SECRET-KEY-1[REDACTED]\n",
    ),
    SecretCase(
        "age_secret_key_in_env",
        f"Environment=SOPS_AGE_KEY={AGE_KEY} SOPS_CONFIG=/etc/sops.yaml",
        AGE_KEY[16:],
        "Environment=SOPS_AGE_KEY=AGE-SECRET-KEY-1[REDACTED] SOPS_CONFIG=/etc/sops.yaml",
    ),
    # --- mail and dial-up credential files: postfix's sasl_passwd, pppd's secrets, msmtprc
    SecretCase(
        "postfix_sasl_passwd_gmail",
        "[smtp.gmail.com]:587 alice@gmail.com:GmailAppPw12345\n",
        "GmailAppPw12345",
        "[smtp.gmail.com]:587 alice@gmail.com:[REDACTED]\n",
    ),
    SecretCase(
        "postfix_sasl_passwd_bracketed_relay",
        "# relay of the ISP\n[mail.isp.example]    username:IspPass77\n",
        "IspPass77",
        "# relay of the ISP\n[mail.isp.example]    username:[REDACTED]\n",
    ),
    SecretCase(
        "postfix_sasl_passwd_sender_dependent",
        "@example.com\trelayuser:SenderDep1\nbob@example.org bob@example.org:Sender Dep 2\n",
        "Sender",
        "@example.com\trelayuser:[REDACTED]\nbob@example.org bob@example.org:[REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "postfix_sasl_passwd_file_plain_relay",
        "==> /etc/postfix/sasl_passwd <==\nsmtp.example.com alice:SaslPlain1\n",
        "SaslPlain1",
        "==> /etc/postfix/sasl_passwd <==\nsmtp.example.com alice:[REDACTED]\n",
    ),
    SecretCase(
        "ppp_chap_secrets",
        "# Secrets for authentication using CHAP\n# client\tserver\tsecret\t\t\tIP addresses\n"
        "alice\t*\tChapSecret77\t*\n",
        "ChapSecret77",
        "# Secrets for authentication using CHAP\n# client\tserver\tsecret\t\t\tIP addresses\n"
        "alice\t*\t[REDACTED]\t*\n",
    ),
    SecretCase(
        "ppp_chap_secrets_quoted_with_addresses",
        '$ cat /etc/ppp/chap-secrets\n"bob"  pptpd  "Chap Secret 2"  10.0.0.2 10.0.0.3\n'
        "carol pptpd ChapSecret3 !10.0.0.9\n",
        "Chap",
        '$ cat /etc/ppp/chap-secrets\n"bob"  pptpd  "[REDACTED]"  10.0.0.2 10.0.0.3\n'
        "carol pptpd [REDACTED] !10.0.0.9\n",
        redactions=2,
    ),
    SecretCase(
        "ppp_pap_secrets",
        "==> /etc/ppp/pap-secrets <==\n# Secrets for authentication using PAP\ndave * PapSecret9\n",
        "PapSecret9",
        "==> /etc/ppp/pap-secrets <==\n# Secrets for authentication using PAP\ndave * [REDACTED]\n",
    ),
    SecretCase(
        "msmtprc_password",
        "account gmail\nhost smtp.gmail.com\nport 587\nauth on\nuser alice@gmail.com\npassword MsmtpPass1\n",
        "MsmtpPass1",
        "account gmail\nhost smtp.gmail.com\nport 587\nauth on\nuser alice@gmail.com\npassword [REDACTED]\n",
    ),
    SecretCase(
        "msmtprc_password_quoted_indented",
        'account work\n  user bob\n  password "Msmtp Pass 2"\n',
        "Msmtp Pass 2",
        'account work\n  user bob\n  password "[REDACTED]"\n',
    ),
    SecretCase(
        "netrc_one_pair_a_line",
        "machine ftp.example.com\n  login alice\n  password NetrcLines1\n",
        "NetrcLines1",
        "machine ftp.example.com\n  login alice\n  password [REDACTED]\n",
    ),
    # --- services' credentials: pgbouncer, snmpd, haproxy, rsyncd, php-fpm
    SecretCase(
        "pgbouncer_userlist_plain",
        '"appuser" "PlainPgbPass42"\n"admin" "Pgb""Quoted"\n',
        "PgbPass42",
        '"appuser" "[REDACTED]"\n"admin" "[REDACTED]"\n',
        redactions=2,
    ),
    SecretCase(
        "pgbouncer_userlist_md5",
        '"stats" "md5a1b2c3d4e5f60718293a4b5c6d7e8f90"',
        "md5a1b2c3d4e5f60718293a4b5c6d7e8f90",
        '"stats" "[REDACTED]"',
    ),
    SecretCase(
        "pgbouncer_userlist_scram",
        '"replicator" "SCRAM-SHA-256$4096:c2FsdHNhbHQ=$c3RvcmVkS2V5:c2VydmVyS2V5"\n',
        "c3RvcmVkS2V5",
        '"replicator" "[REDACTED]"\n',
    ),
    SecretCase(
        "snmpd_rocommunity",
        "sysLocation Server Room\nrocommunity S3cretCommunity default\n",
        "S3cretCommunity",
        "sysLocation Server Room\nrocommunity [REDACTED] default\n",
    ),
    SecretCase(
        "snmpd_rwcommunity_with_source",
        "  rwcommunity RwSecret55 10.0.0.0/8\nrocommunity6 public ::1\n",
        "RwSecret55",
        "  rwcommunity [REDACTED] 10.0.0.0/8\nrocommunity6 [REDACTED] ::1\n",
        redactions=2,
    ),
    SecretCase(
        "snmpd_com2sec",
        "com2sec readonly  default         C0m2secPw\ngroup MyROGroup v2c readonly\n",
        "C0m2secPw",
        "com2sec readonly  default         [REDACTED]\ngroup MyROGroup v2c readonly\n",
    ),
    SecretCase(
        "snmpd_create_user",
        "createUser admin SHA AuthPass12345 AES PrivPass12345\nrwuser admin priv\n",
        "Pass12345",
        "createUser admin SHA [REDACTED] AES [REDACTED]\nrwuser admin priv\n",
        redactions=2,
    ),
    SecretCase(
        "snmpd_create_user_engine_quoted",
        'createUser -e 0x80001f8880c71100000000000000 bob SHA-512 "Auth Pass 1" AES-256 "Priv Pass 1"',
        "Pass 1",
        'createUser -e 0x80001f8880c71100000000000000 bob SHA-512 "[REDACTED]" AES-256 "[REDACTED]"',
        redactions=2,
    ),
    SecretCase(
        "haproxy_stats_auth",
        "listen stats\n    bind *:8404\n    stats enable\n    stats auth admin:HaproxyPass77\n",
        "HaproxyPass77",
        "listen stats\n    bind *:8404\n    stats enable\n    stats auth admin:[REDACTED]\n",
    ),
    SecretCase(
        "haproxy_userlist_insecure_password",
        "userlist admins\n    user bob insecure-password HaproxyPlain1\n    group ops users bob\n",
        "HaproxyPlain1",
        "userlist admins\n    user bob insecure-password [REDACTED]\n    group ops users bob\n",
    ),
    SecretCase(
        "rsyncd_secrets",
        "==> /etc/rsyncd.secrets <==\nalice:RsyncSecret77\n# the backup group\n@backup:RsyncGroup1\n",
        "Rsync",
        "==> /etc/rsyncd.secrets <==\nalice:[REDACTED]\n# the backup group\n@backup:[REDACTED]\n",
        redactions=2,
    ),
    SecretCase(
        "php_fpm_env_password",
        "[www]\nuser = www-data\nenv[DB_HOST] = db\nenv[DB_PASSWORD] = PhpFpmPass1\n",
        "PhpFpmPass1",
        "[www]\nuser = www-data\nenv[DB_HOST] = db\nenv[DB_PASSWORD] = [REDACTED]\n",
    ),
    SecretCase(
        "php_fpm_admin_value_password",
        "php_admin_value[mysqli.default_pw] = PhpAdminPw1\nphp_admin_value[memory_limit] = 256M\n",
        "PhpAdminPw1",
        "php_admin_value[mysqli.default_pw] = [REDACTED]\nphp_admin_value[memory_limit] = 256M\n",
    ),
    SecretCase(
        "php_array_config_password",
        "$cfg['Servers'][$i]['user'] = 'pma';\n$cfg['Servers'][$i]['password'] = 'PmaPass1';\n",
        "PmaPass1",
        "$cfg['Servers'][$i]['user'] = 'pma';\n$cfg['Servers'][$i]['password'] = '[REDACTED]';\n",
    ),
    # --- Java: Spring's and Hibernate's XML properties, Java's XML properties files
    SecretCase(
        "spring_property_value",
        '<bean id="ds" class="org.apache.commons.dbcp2.BasicDataSource">\n'
        '  <property name="username" value="app"/>\n  <property name="password" value="SpringXml1"/>\n</bean>',
        "SpringXml1",
        '<bean id="ds" class="org.apache.commons.dbcp2.BasicDataSource">\n'
        '  <property name="username" value="app"/>\n  <property name="password" value="[REDACTED]"/>\n</bean>',
    ),
    SecretCase(
        "spring_property_other_attributes",
        '<property name="password" type="java.lang.String" value="SpringXml3" />',
        "SpringXml3",
        '<property name="password" type="java.lang.String" value="[REDACTED]" />',
    ),
    SecretCase(
        "spring_property_value_element",
        '<property name="password">\n    <value>SpringXml2</value>\n</property>',
        "SpringXml2",
        '<property name="password">\n    <value>[REDACTED]</value>\n</property>',
    ),
    SecretCase(
        "hibernate_property_text",
        '<property name="hibernate.connection.username">app</property>\n'
        '<property name="hibernate.connection.password">HibernatePw1</property>',
        "HibernatePw1",
        '<property name="hibernate.connection.username">app</property>\n'
        '<property name="hibernate.connection.password">[REDACTED]</property>',
    ),
    SecretCase(
        "java_xml_properties_entry",
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE properties SYSTEM "http://java.sun.com/dtd/properties.dtd">\n'
        '<properties>\n  <entry key="db.user">app</entry>\n  <entry key="db.password">PropsXml1</entry>\n</properties>',
        "PropsXml1",
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE properties SYSTEM "http://java.sun.com/dtd/properties.dtd">\n'
        '<properties>\n  <entry key="db.user">app</entry>\n  <entry key="db.password">[REDACTED]</entry>\n</properties>',
    ),
    SecretCase(
        "xml_param_name_value",
        "<param name='apiToken' value='XmlParamTok1'/>",
        "XmlParamTok1",
        "<param name='apiToken' value='[REDACTED]'/>",
    ),
    # --- password hashes: crypt(3)'s $ID$ (the ID stays), {SCHEME} hashes after a user
    SecretCase(
        "htpasswd_apr1",
        "alice:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\n",
        "HqJZimcKQFAMYayBlzkrA/",
        "alice:$apr1$[REDACTED]\n",
    ),
    SecretCase(
        "htpasswd_bcrypt",
        f"bob:$2y${BCRYPT}\n",
        BCRYPT,
        "bob:$2y$[REDACTED]\n",
    ),
    SecretCase(
        "htpasswd_sha",
        "carol:{SHA}kGByAB793z4R5tK1eC9Hd/4Dhzk=\n",
        "kGByAB793z4R5tK1eC9Hd/4Dhzk=",
        "carol:{SHA}[REDACTED]\n",
    ),
    SecretCase(
        "shadow_sha512",
        f"root:*:19800:0:99999:7:::\nbob:$6${SHA512_CRYPT}:19800:0:99999:7:::\n",
        SHA512_CRYPT,
        "root:*:19800:0:99999:7:::\nbob:$6$[REDACTED]:19800:0:99999:7:::\n",
    ),
    SecretCase(
        "shadow_yescrypt",
        f"alice:$y${YESCRYPT}:19800:0:99999:7:::",
        YESCRYPT,
        "alice:$y$[REDACTED]:19800:0:99999:7:::",
    ),
    SecretCase(
        "shadow_md5_and_locked_sha256",
        "old:$1$abcdefgh$I5tZm9u0Vhfq2nbQG1Jf/1:19000:0:99999:7:::\n"
        "gone:!$5$saltsalt$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZF3CBTK36:19000:0:99999:7:::\n",
        "I5tZm9u0Vhfq2nbQG1Jf/1",
        "old:$1$[REDACTED]:19000:0:99999:7:::\ngone:!$5$[REDACTED]:19000:0:99999:7:::\n",
        redactions=2,
    ),
    SecretCase(
        "argon2_hash_in_json",
        '{"user": "dave", "hash": "$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG"}',
        "RdescudvJCsgt3ub+b+dWRWJTmaaJObG",
        '{"user": "dave", "hash": "$argon2id$[REDACTED]"}',
    ),
    SecretCase(
        "dovecot_passwd_file_plain",
        "eve:{PLAIN}DovecotPlain1:1000:1000::/home/eve::\n",
        "DovecotPlain1",
        "eve:{PLAIN}[REDACTED]:1000:1000::/home/eve::\n",
    ),
    # --- secret URLs: Telegram bot tokens, Discord webhooks
    SecretCase(
        "telegram_bot_api_url",
        f"POST https://api.telegram.org/bot123456789:{TELEGRAM_SECRET}/sendMessage 200",
        TELEGRAM_SECRET,
        "POST https://api.telegram.org/bot123456789:[REDACTED]/sendMessage 200",
    ),
    SecretCase(
        "telegram_bot_file_url",
        f"GET https://api.telegram.org/file/bot5912345678:{TELEGRAM_SECRET_2}/photos/file_1.jpg",
        TELEGRAM_SECRET_2,
        "GET https://api.telegram.org/file/bot5912345678:[REDACTED]/photos/file_1.jpg",
    ),
    SecretCase(
        "telegram_bare_token",
        f"notify: using token 5912345678:{TELEGRAM_SECRET_2} for chat -100123",
        TELEGRAM_SECRET_2,
        "notify: using token 5912345678:[REDACTED] for chat -100123",
    ),
    SecretCase(
        "discord_webhook",
        f"POST https://discord.com/api/webhooks/123456789012345678/{DISCORD_TOKEN} 204",
        DISCORD_TOKEN,
        "POST https://discord.com/api/webhooks/123456789012345678/[REDACTED] 204",
    ),
    SecretCase(
        "discordapp_webhook_versioned",
        f'"url": "https://ptb.discordapp.com/api/v10/webhooks/987654321098765432/{DISCORD_TOKEN}?wait=true"',
        DISCORD_TOKEN,
        '"url": "https://ptb.discordapp.com/api/v10/webhooks/987654321098765432/[REDACTED]?wait=true"',
    ),
    # --- credentials percent-encoded in a URL (access logs): key%3Dvalue, https%3A%2F%2Fuser%3Apw%40
    SecretCase(
        "access_log_encoded_password",
        '10.0.0.5 - - [01/May/2024:10:00:00 +0000] "GET /login?next=%2Fhome%3Fuser%3Dalice%26password%3DHunter2Enc'
        ' HTTP/1.1" 302 0',
        "Hunter2Enc",
        '10.0.0.5 - - [01/May/2024:10:00:00 +0000] "GET /login?next=%2Fhome%3Fuser%3Dalice%26password%3D[REDACTED]'
        ' HTTP/1.1" 302 0',
    ),
    SecretCase(
        "access_log_encoded_password_then_more",
        "GET /sso?next=%2Fapp%3Fpass%3DNestedPw1%26lang%3Den HTTP/1.1",
        "NestedPw1",
        "GET /sso?next=%2Fapp%3Fpass%3D[REDACTED]%26lang%3Den HTTP/1.1",
    ),
    SecretCase(
        "access_log_double_encoded_api_key",
        "GET /r?u=%252Fapi%253Fapi_key%253DDoubleEnc1%2526x%253D1 HTTP/1.1",
        "DoubleEnc1",
        "GET /r?u=%252Fapi%253Fapi_key%253D[REDACTED]%2526x%253D1 HTTP/1.1",
    ),
    SecretCase(
        "access_log_encoded_json_password",
        "GET /track?data=%7B%22user%22%3A%22bob%22%2C%22password%22%3A%22JsonEncPw1%22%7D HTTP/1.1",
        "JsonEncPw1",
        "GET /track?data=%7B%22user%22%3A%22bob%22%2C%22password%22%3A%22[REDACTED]%22%7D HTTP/1.1",
    ),
    SecretCase(
        "access_log_encoded_url_password",
        '"GET /redirect?to=https%3A%2F%2Falice%3AUrlEncPass1%40host.example.com%2F HTTP/1.1" 302',
        "UrlEncPass1",
        '"GET /redirect?to=https%3A%2F%2Falice%3A[REDACTED]%40host.example.com%2F HTTP/1.1" 302',
    ),
    SecretCase(
        "access_log_double_encoded_url_password",
        "GET /r?u=https%253A%252F%252Fbob%253AUrlEnc%2521Pass2%2540db.example.com%253A5432 HTTP/1.1",
        "UrlEnc%2521Pass2",
        "GET /r?u=https%253A%252F%252Fbob%253A[REDACTED]%2540db.example.com%253A5432 HTTP/1.1",
    ),
    # --- chpasswd's input on its command line
    SecretCase(
        "chpasswd_echo_pipe",
        'echo "alice:ChpasswdPass1" | chpasswd',
        "ChpasswdPass1",
        'echo "alice:[REDACTED]" | chpasswd',
    ),
    SecretCase(
        "chpasswd_echo_sudo",
        "+ echo 'deploy:Chpasswd Pass 2' | sudo /usr/sbin/chpasswd",
        "Chpasswd Pass 2",
        "+ echo 'deploy:[REDACTED]' | sudo /usr/sbin/chpasswd",
    ),
    SecretCase(
        "chpasswd_echo_e_two_users",
        'echo -e "alice:ChpwA1\\nbob:ChpwB2" | chpasswd',
        "Chpw",
        'echo -e "alice:[REDACTED]\\nbob:[REDACTED]" | chpasswd',
        redactions=2,
    ),
    SecretCase(
        "chpasswd_printf",
        "printf 'carol:PrintfPw1\\n' | chpasswd -c SHA512",
        "PrintfPw1",
        "printf 'carol:[REDACTED]\\n' | chpasswd -c SHA512",
    ),
    SecretCase(
        "chpasswd_here_string",
        'chpasswd <<< "alice:ChpasswdPass3"\nsudo chpasswd <<<dave:ChpasswdPass4',
        "ChpasswdPass",
        'chpasswd <<< "alice:[REDACTED]"\nsudo chpasswd <<<dave:[REDACTED]',
        redactions=2,
    ),
    SecretCase(
        "chpasswd_echo_bare",
        "echo alice:BareChpw1 | chpasswd",
        "BareChpw1",
        "echo alice:[REDACTED] | chpasswd",
    ),
    # --- programs' secrets on a command line (their argv forms: test_scrubber.test_argv_lists)
    SecretCase(
        "ssh_keygen_new_passphrase",
        "ssh-keygen -t ed25519 -N NewKeyPass1 -f ~/.ssh/id_ed25519",
        "NewKeyPass1",
        "ssh-keygen -t ed25519 -N [REDACTED] -f ~/.ssh/id_ed25519",
    ),
    SecretCase(
        "ssh_keygen_change_passphrase",
        "ssh-keygen -p -P OldKeyPass1 -N 'New Key Pass 2' -f ~/.ssh/id_rsa",
        "KeyPass",
        "ssh-keygen -p -P [REDACTED] -N '[REDACTED]' -f ~/.ssh/id_rsa",
        redactions=2,
    ),
    SecretCase(
        "wpa_passphrase_command",
        "wpa_passphrase HomeNet WpaPassphrase9 >> /etc/wpa_supplicant/wpa_supplicant.conf",
        "WpaPassphrase9",
        "wpa_passphrase HomeNet [REDACTED] >> /etc/wpa_supplicant/wpa_supplicant.conf",
    ),
    SecretCase(
        "wpa_passphrase_quoted",
        'sudo wpa_passphrase "Cafe Guest" "wpa pass phrase"',
        "wpa pass phrase",
        'sudo wpa_passphrase "Cafe Guest" "[REDACTED]"',
    ),
    SecretCase(
        "curl_oauth2_bearer",
        "curl -s --oauth2-bearer OauthTok3nValue https://api.example.com/v1/me",
        "OauthTok3nValue",
        "curl -s --oauth2-bearer [REDACTED] https://api.example.com/v1/me",
    ),
    SecretCase(
        "aws_sse_c_key",
        "aws s3 cp s3://b/k . --sse-c AES256 --sse-c-key SseCustomerKey1234567890abcdef",
        "SseCustomerKey1234567890abcdef",
        "aws s3 cp s3://b/k . --sse-c AES256 --sse-c-key [REDACTED]",
    ),
    SecretCase(
        "aws_sse_c_copy_source_key",
        "aws s3 cp s3://a/k s3://b/k --sse-c-copy-source AES256 --sse-c-copy-source-key=SseSrcKey12345",
        "SseSrcKey12345",
        "aws s3 cp s3://a/k s3://b/k --sse-c-copy-source AES256 --sse-c-copy-source-key=[REDACTED]",
    ),
    SecretCase(
        "rabbitmqadmin_password",
        "rabbitmqadmin -H rabbit -P 15672 -u admin -p RabbitAdm1n list queues",
        "RabbitAdm1n",
        "rabbitmqadmin -H rabbit -P 15672 -u admin -p [REDACTED] list queues",
    ),
    SecretCase(
        "cqlsh_password",
        "cqlsh 10.0.0.5 9042 -u cassandra -p CassPass99 -e 'DESCRIBE KEYSPACES'",
        "CassPass99",
        "cqlsh 10.0.0.5 9042 -u cassandra -p [REDACTED] -e 'DESCRIBE KEYSPACES'",
    ),
    SecretCase(
        "consul_agent_encrypt",
        f"consul agent -server -bootstrap-expect=3 -encrypt={GOSSIP_KEY} -data-dir=/opt/consul",
        GOSSIP_KEY,
        "consul agent -server -bootstrap-expect=3 -encrypt=[REDACTED] -data-dir=/opt/consul",
    ),
    SecretCase(
        "nomad_agent_encrypt",
        "nomad agent -server -encrypt NomadGossipKey123",
        "NomadGossipKey123",
        "nomad agent -server -encrypt [REDACTED]",
    ),
    SecretCase(
        "consul_config_encrypt",
        f'datacenter = "dc1"\nencrypt = "{GOSSIP_KEY}"\n',
        GOSSIP_KEY,
        'datacenter = "dc1"\nencrypt = "[REDACTED]"\n',
    ),
    SecretCase(
        "consul_json_encrypt",
        f'{{"datacenter": "dc1", "encrypt": "{GOSSIP_KEY}", "server": true}}',
        GOSSIP_KEY,
        '{"datacenter": "dc1", "encrypt": "[REDACTED]", "server": true}',
    ),
    SecretCase(
        "ngrok_add_authtoken",
        "ngrok config add-authtoken 2abcDEF3ghiJKL4mnoPQR5stuVWX6yz_7ABCdefGHIjklMN",
        "2abcDEF3ghiJKL4mnoPQR5stuVWX6yz_7ABCdefGHIjklMN",
        "ngrok config add-authtoken [REDACTED]",
    ),
    SecretCase(
        "ngrok_v2_authtoken",
        "./ngrok authtoken NgrokV2Token123",
        "NgrokV2Token123",
        "./ngrok authtoken [REDACTED]",
    ),
    SecretCase(
        "frpc_token",
        "frpc tcp -s frps.example.com:7000 -t FrpToken123 -l 22 -r 6000",
        "FrpToken123",
        "frpc tcp -s frps.example.com:7000 -t [REDACTED] -l 22 -r 6000",
    ),
    # grafana-cli admin reset-admin-password PW (Grafana 10+: grafana cli ...), global flags before it
    SecretCase(
        "grafana_cli_reset_admin_password",
        "grafana-cli admin reset-admin-password NewGrafPass77",
        "NewGrafPass77",
        "grafana-cli admin reset-admin-password [REDACTED]",
    ),
    SecretCase(
        "grafana_cli_reset_admin_password_after_flags",
        "sudo grafana-cli --homepath /usr/share/grafana --config /etc/grafana/grafana.ini admin "
        "reset-admin-password 'New Graf Pass 78'",
        "New Graf Pass 78",
        "sudo grafana-cli --homepath /usr/share/grafana --config /etc/grafana/grafana.ini admin "
        "reset-admin-password '[REDACTED]'",
    ),
    SecretCase(
        "grafana_cli_subcommand_reset_admin_password",
        "  501  /usr/share/grafana/bin/grafana cli --homepath /usr/share/grafana admin reset-admin-password GrafHist79",
        "GrafHist79",
        "  501  /usr/share/grafana/bin/grafana cli --homepath /usr/share/grafana admin reset-admin-password "
        "[REDACTED]",
    ),
    # az login's -p (a service principal's client secret or a user's password), az acr's -p
    SecretCase(
        "az_login_service_principal_p",
        "az login --service-principal -u 3f2a9c1e-app -p AzSpV4lue99 --tenant contoso.onmicrosoft.com",
        "AzSpV4lue99",
        "az login --service-principal -u 3f2a9c1e-app -p [REDACTED] --tenant contoso.onmicrosoft.com",
    ),
    SecretCase(
        "az_login_service_principal_p_equals",
        "+ az login --service-principal -u app -p=AzSpV4lue98 -t contoso",
        "AzSpV4lue98",
        "+ az login --service-principal -u app -p=[REDACTED] -t contoso",
    ),
    SecretCase(
        "az_login_service_principal_password",
        "az login --service-principal --username app --password AzSpV4lue97 --tenant t && az account show",
        "AzSpV4lue97",
        "az login --service-principal --username app --password [REDACTED] --tenant t && az account show",
    ),
    SecretCase(
        "az_login_service_principal_password_equals",
        "az login --service-principal -u app --password=AzSpV4lue96 --tenant t",
        "AzSpV4lue96",
        "az login --service-principal -u app --password=[REDACTED] --tenant t",
    ),
    SecretCase(
        "az_acr_login_p",
        "az acr login --name myreg -u myreg -p AcrPassw0rd95\naz acr import -n myreg --source x/y:1 -u u -p AcrPw94",
        "AcrPassw0rd95",
        "az acr login --name myreg -u myreg -p [REDACTED]\naz acr import -n myreg --source x/y:1 -u u -p [REDACTED]",
        redactions=2,
    ),
    # az storage's account key, SAS token and connection string (AZURE_STORAGE_KEY in its environment)
    SecretCase(
        "az_storage_account_key",
        "az storage blob list --account-name acct --account-key AzAcctKey93/abc+def== -c logs -o table",
        "AzAcctKey93/abc+def==",
        "az storage blob list --account-name acct --account-key [REDACTED] -c logs -o table",
    ),
    SecretCase(
        "az_storage_sas_token",
        "az storage blob upload -f a.txt -c c -n a.txt --account-name acct "
        "--sas-token 'sv=2022-11-02&ss=b&srt=co&sp=rw&se=2030-01-01&sig=AzSig92%2Fx%3D'",
        "AzSig92",
        "az storage blob upload -f a.txt -c c -n a.txt --account-name acct --sas-token '[REDACTED]'",
    ),
    SecretCase(
        "az_storage_connection_string",
        'az storage container list --connection-string "DefaultEndpointsProtocol=https;AccountName=acct;'
        'AccountKey=AzConnKey91==;EndpointSuffix=core.windows.net"',
        "AzConnKey91==",
        'az storage container list --connection-string "DefaultEndpointsProtocol=https;AccountName=acct;'
        'AccountKey=[REDACTED];EndpointSuffix=core.windows.net"',
    ),
    SecretCase(
        "az_storage_key_environment",
        "export AZURE_STORAGE_ACCOUNT=acct\nexport AZURE_STORAGE_KEY=AzEnvKey90+x==\naz storage blob list -c c",
        "AzEnvKey90+x==",
        "export AZURE_STORAGE_ACCOUNT=acct\nexport AZURE_STORAGE_KEY=[REDACTED]\naz storage blob list -c c",
    ),
    # a file's name ending a path is read as such only before ": " and a message; grep's PATH:LINE
    # and a path named like a secret with no extension keep their values hidden
    SecretCase(
        "grep_output_of_a_token_file",
        "$ grep -r . /run/secrets\n/run/secrets/api-token.txt:GrepTok89\n",
        "GrepTok89",
        "$ grep -r . /run/secrets\n/run/secrets/api-token.txt:[REDACTED]\n",
    ),
    SecretCase(
        "path_named_password_then_value",
        "/run/secrets/db_password: Hunter88x",
        "Hunter88x",
        "/run/secrets/db_password: [REDACTED]",
    ),
    SecretCase(
        "path_with_a_secret_extension_then_value",
        "/etc/app/db.password: Hunter87x",
        "Hunter87x",
        "/etc/app/db.password: [REDACTED]",
    ),
    SecretCase(
        "kubectl_create_secret_from_literal",
        "kubectl -n prod create secret generic db --from-literal=username=app --from-literal=api=KubeLiteral1",
        "KubeLiteral1",
        "kubectl -n prod create secret generic db --from-literal=username=[REDACTED] "
        "--from-literal=api=[REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "kubectl_create_secret_from_literal_quoted",
        "kubectl create secret generic api --from-literal=token='S!B\\*d$zDsb=' --from-literal \"key=Kube Lit 2\"",
        "Kube Lit 2",
        "kubectl create secret generic api --from-literal=token='[REDACTED]' --from-literal \"key=[REDACTED]\"",
        redactions=2,
    ),
    SecretCase(
        "mariadb_admin_password_word",
        "mariadb-admin -uroot -pOldMaria1 password NewMariaPw2",
        "MariaPw2",
        "mariadb-admin -uroot -p[REDACTED] password [REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "mariabackup_password",
        "mariabackup --backup --target-dir=/backup --user=root -pMariaBak1",
        "MariaBak1",
        "mariabackup --backup --target-dir=/backup --user=root -p[REDACTED]",
    ),
    SecretCase(
        "xtrabackup_password",
        "xtrabackup --backup -uroot -pXtraBak1 --target-dir=/data/backups",
        "XtraBak1",
        "xtrabackup --backup -uroot -p[REDACTED] --target-dir=/data/backups",
    ),
    SecretCase(
        "valkey_cli_password",
        "valkey-cli -h cache -a ValkeyPw1 --no-auth-warning ping",
        "ValkeyPw1",
        "valkey-cli -h cache -a [REDACTED] --no-auth-warning ping",
    ),
    SecretCase(
        "keydb_cli_auth_and_config",
        "keydb-cli AUTH default KeydbAuth1\nkeydb-cli CONFIG SET requirepass KeydbReq1",
        "Keydb",
        "keydb-cli AUTH default [REDACTED]\nkeydb-cli CONFIG SET requirepass [REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "redis_benchmark_password",
        "redis-benchmark -h cache -a BenchPw1 -c 50 -n 100000 -q",
        "BenchPw1",
        "redis-benchmark -h cache -a [REDACTED] -c 50 -n 100000 -q",
    ),
    SecretCase(
        "valkey_benchmark_password",
        "valkey-benchmark -a ValkeyBench1 -t set,get",
        "ValkeyBench1",
        "valkey-benchmark -a [REDACTED] -t set,get",
    ),
    SecretCase(
        "valkey_cli_acl_setuser",
        "valkey-cli ACL SETUSER bob on >ValkeyAcl1 ~cache:* +get",
        "ValkeyAcl1",
        "valkey-cli ACL SETUSER bob on >[REDACTED] ~cache:* +get",
    ),
    # WordPress's wp-config.php and PHP's define('NAME', 'VALUE') whose NAME says secret
    SecretCase(
        "wordpress_db_password_define",
        "define( 'DB_NAME', 'wordpress' );\ndefine( 'DB_USER', 'wp' );\n"
        "define( 'DB_PASSWORD', 'WpPass123' );\ndefine( 'DB_HOST', 'localhost' );",
        "WpPass123",
        "define( 'DB_NAME', 'wordpress' );\ndefine( 'DB_USER', 'wp' );\n"
        "define( 'DB_PASSWORD', '[REDACTED]' );\ndefine( 'DB_HOST', 'localhost' );",
    ),
    SecretCase(
        "wordpress_keys_and_salts",
        "define( 'AUTH_KEY',         'r^Jq|3B+ZVh~8@<K,W!x 1AuthKey' );\n"
        "define( 'SECURE_AUTH_KEY',  'Zx;0)9w=Hk[4p`M2SecAuthKey' );\n"
        "define( 'LOGGED_IN_KEY',    'q@V?3s$Lw*8fLoggedInKey' );\n"
        "define( 'NONCE_KEY',        'y:2{G/Nk6&NonceKey' );\n"
        "define( 'AUTH_SALT',        'p#8Xz.AuthSalt' );\n"
        "define( 'SECURE_AUTH_SALT', 'D-4m]wSecAuthSalt' );\n"
        "define( 'LOGGED_IN_SALT',   'u%7c>LoggedInSalt' );\n"
        "define( 'NONCE_SALT',       't~1e,NonceSalt' );",
        "LoggedInSalt",
        "define( 'AUTH_KEY',         '[REDACTED]' );\n"
        "define( 'SECURE_AUTH_KEY',  '[REDACTED]' );\n"
        "define( 'LOGGED_IN_KEY',    '[REDACTED]' );\n"
        "define( 'NONCE_KEY',        '[REDACTED]' );\n"
        "define( 'AUTH_SALT',        '[REDACTED]' );\n"
        "define( 'SECURE_AUTH_SALT', '[REDACTED]' );\n"
        "define( 'LOGGED_IN_SALT',   '[REDACTED]' );\n"
        "define( 'NONCE_SALT',       '[REDACTED]' );",
        redactions=8,
    ),
    SecretCase(
        "php_define_double_quoted_and_upper_case",
        "define(\"SMTP_PASS\", \"PhpSmtp1\");\nDEFINE('API_TOKEN','PhpTok2', true);",
        "PhpSmtp1",
        "define(\"SMTP_PASS\", \"[REDACTED]\");\nDEFINE('API_TOKEN','[REDACTED]', true);",
        redactions=2,
    ),
    # a secret variable's default: WordPress's docker image, Laravel, Django
    SecretCase(
        "env_default_values",
        "define( 'DB_PASSWORD', getenv_docker('WORDPRESS_DB_PASSWORD', 'DockerWpPw1') );\n"
        "    'password' => env('DB_PASSWORD', 'LaravelPw1'),\n"
        'DB_PASSWORD = os.environ.get("DB_PASSWORD", "DjangoPw1")',
        "LaravelPw1",
        "define( 'DB_PASSWORD', getenv_docker('WORDPRESS_DB_PASSWORD', '[REDACTED]') );\n"
        "    'password' => env('DB_PASSWORD', '[REDACTED]'),\n"
        'DB_PASSWORD = os.environ.get("DB_PASSWORD", "[REDACTED]")',
        redactions=3,
    ),
    # fetchmail's rc file: password or pass, quoted or not, on the poll line or a user's
    SecretCase(
        "fetchmailrc_poll_password",
        'poll mail.example.com user "alice" password "FetchPw1"',
        "FetchPw1",
        'poll mail.example.com user "alice" password "[REDACTED]"',
    ),
    SecretCase(
        "fetchmailrc_pass_bare",
        "poll pop.example.com protocol pop3 user alice pass FetchPw2 is alice here",
        "FetchPw2",
        "poll pop.example.com protocol pop3 user alice pass [REDACTED] is alice here",
    ),
    SecretCase(
        "fetchmailrc_user_line",
        "poll imap.example.com proto imap\n    user 'bob' there with password FetchPw3 is bob here options ssl keep",
        "FetchPw3",
        "poll imap.example.com proto imap\n    user 'bob' there with password [REDACTED] is bob here options ssl keep",
    ),
    SecretCase(
        "fetchmailrc_password_line_with_options",
        'poll mail.example.net with proto IMAP\n  username "carol@example.net"\n  password "Fetch Pw4" options ssl',
        "Fetch Pw4",
        'poll mail.example.net with proto IMAP\n  username "carol@example.net"\n  password "[REDACTED]" options ssl',
    ),
    SecretCase(
        "fetchmailrc_poll_options_then_password",
        "poll mail.example.org via 10.0.0.9 port 995 auth password password FetchPw5",
        "FetchPw5",
        "poll mail.example.org via 10.0.0.9 port 995 auth password password [REDACTED]",
    ),
    SecretCase(
        "fetchmailrc_password_line_bare",
        "poll mail.example.com\n    user alice\n    password FetchPw6 is alice here",
        "FetchPw6",
        "poll mail.example.com\n    user alice\n    password [REDACTED] is alice here",
    ),
    # Java web.xml's context and init params, env entries
    SecretCase(
        "web_xml_context_param",
        "<context-param>\n    <param-name>db.password</param-name>\n"
        "    <param-value>WebXmlPw1</param-value>\n</context-param>",
        "WebXmlPw1",
        "<context-param>\n    <param-name>db.password</param-name>\n"
        "    <param-value>[REDACTED]</param-value>\n</context-param>",
    ),
    SecretCase(
        "web_xml_init_param_one_line",
        "<init-param><param-name>password</param-name><param-value>WebXmlPw2</param-value></init-param>",
        "WebXmlPw2",
        "<init-param><param-name>password</param-name><param-value>[REDACTED]</param-value></init-param>",
    ),
    SecretCase(
        "web_xml_env_entry",
        "<env-entry>\n  <env-entry-name>jdbc/apiToken</env-entry-name>\n"
        "  <env-entry-type>java.lang.String</env-entry-type>\n"
        "  <env-entry-value>WebXmlTok3</env-entry-value>\n</env-entry>",
        "WebXmlTok3",
        "<env-entry>\n  <env-entry-name>jdbc/apiToken</env-entry-name>\n"
        "  <env-entry-type>java.lang.String</env-entry-type>\n"
        "  <env-entry-value>[REDACTED]</env-entry-value>\n</env-entry>",
    ),
    # passwd reading the password on its standard input
    SecretCase(
        "passwd_stdin_echo",
        'echo "PasswdStdin1" | passwd --stdin alice',
        "PasswdStdin1",
        'echo "[REDACTED]" | passwd --stdin alice',
    ),
    SecretCase(
        "passwd_stdin_printf_sudo",
        "printf 'PasswdStdin2\\n' | sudo passwd --stdin bob",
        "PasswdStdin2",
        "printf '[REDACTED]' | sudo passwd --stdin bob",
    ),
    SecretCase(
        "passwd_stdin_here_string",
        "passwd --stdin alice <<< PasswdStdin3",
        "PasswdStdin3",
        "passwd --stdin alice <<< [REDACTED]",
    ),
    SecretCase(
        "passwd_echo_twice",
        'echo -e "PasswdStdin4\\nPasswdStdin4" | passwd carol',
        "PasswdStdin4",
        'echo -e "[REDACTED]" | passwd carol',
    ),
    SecretCase(
        "passwd_stdin_printf_format",
        "printf '%s\\n' 'PasswdStdin5' | /usr/bin/passwd --stdin dave",
        "PasswdStdin5",
        "printf '%s\\n' '[REDACTED]' | /usr/bin/passwd --stdin dave",
    ),
    # openssl passwd's plaintext arguments (-stdin and -in read it elsewhere)
    SecretCase(
        "openssl_passwd_salt",
        "openssl passwd -6 -salt xyz OpensslPw1",
        "OpensslPw1",
        "openssl passwd -6 -salt xyz [REDACTED]",
    ),
    SecretCase(
        "openssl_passwd_quoted_in_substitution",
        "useradd -m -p \"$(openssl passwd -1 'Openssl Pw2')\" alice\n"
        'usermod -p "$(openssl passwd -6 OpensslPw3)" bob',
        "OpensslPw3",
        "useradd -m -p \"$(openssl passwd -1 '[REDACTED]')\" alice\n"
        'usermod -p "$(openssl passwd -6 [REDACTED])" bob',
        redactions=2,
    ),
    SecretCase(
        "openssl_passwd_several",
        "openssl passwd -apr1 -salt s3 OpensslPw4 OpensslPw5",
        "OpensslPw5",
        "openssl passwd -apr1 -salt s3 [REDACTED] [REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "openssl_passwd_after_options_end",
        "openssl passwd -6 -salt s5 -- -OpensslPw6 --OpensslPw7\nid",
        "OpensslPw7",
        "openssl passwd -6 -salt s5 -- [REDACTED]\nid",
    ),
    # strongSwan's and libreswan's ipsec.secrets
    SecretCase(
        "ipsec_secrets_psk",
        '# /etc/ipsec.secrets - strongSwan IPsec secrets file\n: PSK "IpsecPsk1"',
        "IpsecPsk1",
        '# /etc/ipsec.secrets - strongSwan IPsec secrets file\n: PSK "[REDACTED]"',
    ),
    SecretCase(
        "ipsec_secrets_any_psk",
        '%any : PSK "IpsecPsk2"\n2001:db8::1 : PSK "IpsecPsk3"',
        "IpsecPsk",
        '%any : PSK "[REDACTED]"\n2001:db8::1 : PSK "[REDACTED]"',
        redactions=2,
    ),
    SecretCase(
        "ipsec_secrets_hosts_base64_psk",
        "moon.strongswan.org sun.strongswan.org : PSK 0sv+NkxY9LLZvwj4qCC2o/gGrWDF2d21jL",
        "v+NkxY9LLZvwj4qCC2o",
        "moon.strongswan.org sun.strongswan.org : PSK [REDACTED]",
    ),
    SecretCase(
        "ipsec_secrets_xauth_and_eap",
        ': XAUTH alice "IpsecXauth1"\nbob : XAUTH "IpsecXauth2"\ncarol@strongswan.org : EAP "IpsecEap1"',
        "Ipsec",
        ': XAUTH alice "[REDACTED]"\nbob : XAUTH "[REDACTED]"\ncarol@strongswan.org : EAP "[REDACTED]"',
        redactions=3,
    ),
    SecretCase(
        "ipsec_secrets_rsa_passphrase",
        ': RSA moonKey.pem "IpsecRsaPass1"\n: ECDSA /etc/ipsec.d/private/ec.pem IpsecEcPass2',
        "Ipsec",
        ': RSA moonKey.pem "[REDACTED]"\n: ECDSA /etc/ipsec.d/private/ec.pem [REDACTED]',
        redactions=2,
    ),
    # snmptrapd's and snmpd's trap communities
    SecretCase(
        "snmptrapd_auth_community",
        "authCommunity log,execute,net TrapCommunity1\nauthCommunity log TrapCommunity2 10.0.0.0/8",
        "TrapCommunity",
        "authCommunity log,execute,net [REDACTED]\nauthCommunity log [REDACTED] 10.0.0.0/8",
        redactions=2,
    ),
    SecretCase(
        "snmpd_trap_sinks",
        "trap2sink 10.0.0.1 SinkCommunity1\ntrapsink nms.example.com SinkCommunity2 162\n"
        "informsink 10.0.0.2 InformCommunity1",
        "SinkCommunity",
        "trap2sink 10.0.0.1 [REDACTED]\ntrapsink nms.example.com [REDACTED] 162\ninformsink 10.0.0.2 [REDACTED]",
        redactions=3,
    ),
    SecretCase(
        "snmpd_trapsess",
        "trapsess -v 2c -c TrapsessCommunity1 nms.example.com:162\n"
        "trapsess -v 3 -u traps -a SHA -A TrapsessAuth1 -l authPriv -x AES -X TrapsessPriv1 nms",
        "Trapsess",
        "trapsess -v 2c -c [REDACTED] nms.example.com:162\n"
        "trapsess -v 3 -u traps -a SHA -A [REDACTED] -l authPriv -x AES -X [REDACTED] nms",
        redactions=3,
    ),
    # Consul's and Nomad's gossip key in HCL or JSON: any quoted value, not only a 16/32-byte one
    SecretCase(
        "consul_hcl_encrypt_any_length",
        'datacenter = "dc1"\nencrypt = "aGVsbG8gd29ybGQgdGhpcyBpcyAyNCBi"\nserver = true',
        "aGVsbG8gd29ybGQgdGhpcyBpcyAyNCBi",
        'datacenter = "dc1"\nencrypt = "[REDACTED]"\nserver = true',
    ),
    SecretCase(
        "nomad_json_encrypt_passphrase",
        '{"server": {"enabled": true, "encrypt": "gossip-k3y-from-vault-2024"}}',
        "gossip-k3y-from-vault-2024",
        '{"server": {"enabled": true, "encrypt": "[REDACTED]"}}',
    ),
    # a Python or TypeScript annotated assignment: the value after "=", not the type
    SecretCase(
        "python_annotated_password",
        'class Settings(BaseSettings):\n    password: str = "PyAnnot1"\n    api_key: Optional[str] = "PyAnnot2"',
        "PyAnnot",
        'class Settings(BaseSettings):\n    password: str = "[REDACTED]"\n    api_key: Optional[str] = "[REDACTED]"',
        redactions=2,
    ),
    SecretCase(
        "typescript_annotated_token",
        "private readonly apiToken: string = 'TsAnnot1';",
        "TsAnnot1",
        "private readonly apiToken: string = '[REDACTED]';",
    ),
    # a bare value holding a balanced group (its closer inside the value), or an opener never
    # closed (the rest of the word); an unbalanced closer still ends it: f(password=x)
    SecretCase(
        "bare_value_with_a_parenthesised_group",
        "login ok password=Pa(ss)word1 user=bob",
        "(ss)word1",
        "login ok password=[REDACTED] user=bob",
    ),
    SecretCase(
        "bare_values_with_brackets_and_braces",
        "api_key=ab[1]cd\ntoken=x{y!}z;\nsecret=q(1)w[2]e{3!}r",
        "[1]cd",
        "api_key=[REDACTED]\ntoken=[REDACTED];\nsecret=[REDACTED]",
        redactions=3,
    ),
    SecretCase(
        "bare_value_with_an_opener_never_closed",
        "password=abc(def next\napi_key=ab[cd)ef",
        "(def",
        "password=[REDACTED] next\napi_key=[REDACTED]",
        redactions=2,
    ),
    SecretCase(
        "bare_values_with_groups_inside_code",
        "connect(user, password=Pw(1)x)\nf(password=Pw2x)\n{password: Pa(ss)w3}\n[password=ab[c]d]",
        "(1)x",
        "connect(user, password=[REDACTED])\nf(password=[REDACTED])\n{password: [REDACTED]}\n"
        "[password=[REDACTED]]",
        redactions=4,
    ),
    # private keys printed as numbers: each private number's hex lines (the labels and the
    # public modulus stay)
    SecretCase(
        "openssl_rsa_text",
        f"$ openssl rsa -in server.key -text -noout\n{RSA_TEXT}$ ",
        "ce:cb:9d:9d:98:cd:33:df",
        f"$ openssl rsa -in server.key -text -noout\n{RSA_TEXT_HIDDEN}$ ",
        redactions=6,
    ),
    SecretCase(
        "openssl_ec_pkey_text",
        f"Private-Key: (256 bit)\npriv:\n    {EC_TEXT_PRIVATE}\n{EC_TEXT_PUBLIC}",
        "54:13:92:56:49:21:34:9e",
        f"Private-Key: (256 bit)\npriv:\n    [REDACTED]\n{EC_TEXT_PUBLIC}",
    ),
    SecretCase(
        "openssl_ed25519_and_dh_text",
        "ED25519 Private-Key:\npriv:\n    71:70:de:56:70:65:f0:ac:86:46:6a:38:8b:15:49:\n"
        "    d6:9b:b1:3d:28:54:8b:28:39:09:2c:22:51:19:1b:\n    f6:38\n"
        "pub:\n    70:fe:b6:bb:56:b8:30:86:ed:bb:59:c1:8a:d2:6f:\n"
        "DH Private-Key: (2048 bit)\r\nprivate-key:\r\n    00:9d:4f:89:88:5d:e5:f2:4e:cd:55:dc:e9:42:1c:\r\n"
        "    ad:8d:47:2c:cc:d8:41:19:a4:4d:d5:70:31:af\r\npublic-key:\r\n"
        "    DH Private-Key: (2048 bit)\n    private-key:\n        5c:17:e2:0a:93:41:c8:7d:\n",
        "d6:9b:b1:3d:28:54:8b:28",
        "ED25519 Private-Key:\npriv:\n    [REDACTED]\n"
        "pub:\n    70:fe:b6:bb:56:b8:30:86:ed:bb:59:c1:8a:d2:6f:\n"
        "DH Private-Key: (2048 bit)\r\nprivate-key:\r\n    [REDACTED]\r\npublic-key:\r\n"
        "    DH Private-Key: (2048 bit)\n    private-key:\n        [REDACTED]\n",
        redactions=3,
    ),
    SecretCase(
        "libreswan_inline_rsa_key",
        LIBRESWAN_RSA_PUBLIC
        + "".join(f"\t{name}: {value}\n" for name, value in LIBRESWAN_RSA_PRIVATE)
        + "\t}\n",
        "5oXPGaTtMtHQ",
        LIBRESWAN_RSA_PUBLIC
        + "".join(f"\t{name}: [REDACTED]\n" for name, _ in LIBRESWAN_RSA_PRIVATE)
        + "\t}\n",
        redactions=6,
    ),
    # private keys printed by `openssl asn1parse`: the private values, decided from the structure
    SecretCase(
        "asn1parse_rsa_traditional",
        f"$ openssl asn1parse -in server.key\n{ASN1_RSA_TRADITIONAL}$ ",
        _asn1_value(ASN1_RSA_TRADITIONAL, 4),
        f"$ openssl asn1parse -in server.key\n{_asn1_hiding(ASN1_RSA_TRADITIONAL, 4, 5, 6, 7, 8, 9)}$ ",
        redactions=6,
    ),
    SecretCase(
        "asn1parse_rsa_three_primes",
        ASN1_RSA_THREE_PRIMES + "$ ",
        _asn1_value(ASN1_RSA_THREE_PRIMES, 13),
        _asn1_hiding(ASN1_RSA_THREE_PRIMES, 4, 5, 6, 7, 8, 9, 12, 13, 14) + "$ ",
        redactions=9,
    ),
    SecretCase(
        "asn1parse_dsa_traditional",
        ASN1_DSA_TRADITIONAL + "$ ",
        _asn1_value(ASN1_DSA_TRADITIONAL, 6),
        _asn1_hiding(ASN1_DSA_TRADITIONAL, 6) + "$ ",
    ),
    SecretCase(
        "asn1parse_ec_pkcs8",
        ASN1_EC_PKCS8 + "$ ",
        _asn1_value(ASN1_EC_PKCS8, 5),
        _asn1_hiding(ASN1_EC_PKCS8, 5) + "$ ",
    ),
    SecretCase(
        "asn1parse_x25519_pkcs8_crlf",
        ASN1_X25519_PKCS8.replace("\n", "\r\n") + "$ ",
        _asn1_value(ASN1_X25519_PKCS8, 4),
        _asn1_hiding(ASN1_X25519_PKCS8, 4).replace("\n", "\r\n") + "$ ",
    ),
    SecretCase(
        "asn1parse_ed25519_indented_dump",
        ASN1_ED25519_INDENT_DUMP + "$ ",
        "76 62 80 f3 49 73-af c3",
        ASN1_ED25519_INDENT_DUMP.split("      0000 - ")[0] + "      [REDACTED]\n$ ",
    ),
    SecretCase(
        "asn1parse_ec_sec1",
        ASN1_EC_SEC1 + "$ ",
        _asn1_value(ASN1_EC_SEC1, 2),
        _asn1_hiding(ASN1_EC_SEC1, 2) + "$ ",
    ),
    SecretCase(
        "asn1parse_encrypted_pkcs8",
        ASN1_ENCRYPTED_PKCS8 + "$ ",
        _asn1_value(ASN1_ENCRYPTED_PKCS8, 15),
        _asn1_hiding(ASN1_ENCRYPTED_PKCS8, 15) + "$ ",
    ),
    # -strparse prints a key's inner OCTET STRING at depth 0: no context, a long value goes
    SecretCase(
        "asn1parse_strparse_inner_key",
        f"$ openssl asn1parse -in ed.pem -strparse 12\n{ASN1_ED25519_STRPARSE}$ ",
        _asn1_value(ASN1_ED25519_STRPARSE, 0),
        f"$ openssl asn1parse -in ed.pem -strparse 12\n{_asn1_hiding(ASN1_ED25519_STRPARSE, 0)}$ ",
    ),
    # a tail cut inside a key (its SEQUENCE's line and version left out): every long value goes,
    # the public modulus too; the short public exponent stays
    SecretCase(
        "asn1parse_tail_cut_inside_a_key",
        ASN1_RSA_TRADITIONAL.split("\n", 2)[2] + "$ ",
        _asn1_value(ASN1_RSA_TRADITIONAL, 9),
        _asn1_hiding(ASN1_RSA_TRADITIONAL, 2, 4, 5, 6, 7, 8, 9).split("\n", 2)[2] + "$ ",
        redactions=7,
    ),
    # OpenSSL 3.5's post-quantum keys as text: the seeds and private keys go, the public keys stay
    SecretCase(
        "ml_dsa_pkey_text",
        f"ML-DSA-44 Private-Key:\n{ML_DSA_SEED}{ML_DSA_PRIV}{ML_DSA_PUB}$ ",
        _hex_row(ML_DSA_PRIV, 100),
        f"ML-DSA-44 Private-Key:\n{_hidden_number(ML_DSA_SEED)}{_hidden_number(ML_DSA_PRIV)}{ML_DSA_PUB}$ ",
        redactions=2,
    ),
    SecretCase(
        "ml_kem_pkey_text",
        f"ML-KEM-768 Private-Key:\n{ML_KEM_SEED}{ML_KEM_DK}{ML_KEM_EK}$ ",
        _hex_row(ML_KEM_SEED, 2),
        f"ML-KEM-768 Private-Key:\n{_hidden_number(ML_KEM_SEED)}{_hidden_number(ML_KEM_DK)}{ML_KEM_EK}$ ",
        redactions=2,
    ),
    SecretCase(
        "slh_dsa_pkey_text",
        f"SLH-DSA-SHA2-128s Private-Key:\n{SLH_DSA_PRIV}{SLH_DSA_PUB}$ ",
        _hex_row(SLH_DSA_PRIV, 3),
        f"SLH-DSA-SHA2-128s Private-Key:\n{_hidden_number(SLH_DSA_PRIV)}{SLH_DSA_PUB}$ ",
    ),
    # a tail starting inside a post-quantum key's seed or dk: hidden by the label after them
    SecretCase(
        "ml_dsa_text_tail_inside_the_seed",
        ML_DSA_SEED.split("\n", 2)[2] + ML_DSA_PRIV + ML_DSA_PUB,
        _hex_row(ML_DSA_SEED, 1),
        "    [REDACTED]\n" + _hidden_number(ML_DSA_PRIV) + ML_DSA_PUB,
        redactions=2,
    ),
    SecretCase(
        "ml_kem_text_tail_inside_the_dk",
        ML_KEM_DK.split("\n", 100)[100] + ML_KEM_EK,
        _hex_row(ML_KEM_DK, 150),
        "    [REDACTED]\n" + ML_KEM_EK,
    ),
)

LOOK_ALIKES: tuple[LookAlike, ...] = (
    LookAlike(
        "redis_info",
        "keyspace_hits:42\r\nkeyspace_misses:7\r\nevicted_keys:0\r\n",
        "key inside a counter name",
    ),
    LookAlike("mysql_status", "Key_reads\t1234\nKey_blocks_used\t56\nKey_writes: 9", "Key_ counters"),
    LookAlike("monkey", "monkey: 3 bananas", "ends with 'key'"),
    LookAlike(
        "nsswitch",
        "passwd:         files systemd\ngroup:          files systemd\nshadow:         files",
        "the passwd database's sources",
    ),
    LookAlike("mysql_p_prompt", "mysql -u root -p shop", "-p then the database: mysql prompts"),
    LookAlike(
        "curl_user_prompt", "curl -u deploy https://ci.example.com/api", "curl prompts for the password"
    ),
    LookAlike("ldap_prompt", "ldapsearch -x -D cn=admin,dc=ex -W -b dc=ex", "-W prompts"),
    LookAlike("redis_cli_plain", "redis-cli -h cache -p 6380 info memory", "no -a"),
    LookAlike("mongosh_port", "mongosh --port 27017 --quiet", "--port, not -p"),
    LookAlike("url_scheme_after_colon", "key_url:https://example.com/k", "a URL after a colon"),
    LookAlike("primary_key", "primary_key: id, key_count=12", "key as a word part, not a secret key"),
    LookAlike(
        "tokenizer_version", "tokenizer_version: 3, max_tokens: 4096, tokens_used: 12", "token-ish names"
    ),
    LookAlike("password_policy", "password_policy: strict\npassword_min_length: 12", "describes a password"),
    LookAlike("passed_tests", "passed_tests: 41 of 42; bypass: none", "pass as part of a word"),
    LookAlike("author_authority", "author: Jane Doe, authority: ca.example.com", "auth as part of a word"),
    LookAlike("git_sha", "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 (HEAD -> main)", "long hex"),
    LookAlike("uuid", "request_id=123e4567-e89b-12d3-a456-426614174000 done", "UUID"),
    LookAlike(
        "akia_in_longer_word", "XAKIAIOSFODNN7EXAMPLE AKIAIOSFODNN7EXAMPLE99", "AKIA inside a longer word"
    ),
    LookAlike("url_without_credentials", "GET https://example.com:8443/path?q=1#top", "URL with a port"),
    LookAlike(
        "url_user_only", "postgres://app@db:5432/app and ssh://git@host:22/repo", "user without password"
    ),
    LookAlike("email", "contact ops@example.com or git@github.com:org/repo.git", "user@host"),
    LookAlike(
        "sonde_words",
        "sonde_agent_version 0.1.0; enr_tokens_total 3; pre_sonde_" + "x" * 43,
        "Sonde-prefixed names that are not a key's shape",
    ),
    LookAlike(
        "bearer_in_prose", "The Bearer of this letter is a friend; bearer tokens expire.", "Bearer as a word"
    ),
    LookAlike("basic_in_prose", "Basic authentication is enabled for /admin", "Basic as a word"),
    LookAlike("token_type", "token_type: Bearer\nauth_method: scram-sha-256", "describes the credential"),
    LookAlike(
        "png_base64",
        "thumbnail: iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "base64 image header",
    ),
    LookAlike("masked_password", "password: ********", "already masked"),
    LookAlike("pwd_env", "PWD=/home/sonde OLDPWD=/tmp", "working directory, not a password"),
    LookAlike(
        "certificate",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUWq3VZMq0\n-----END CERTIFICATE-----",
        "PEM, but public",
    ),
    LookAlike("public_key", "public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGh0 sonde@web-1", "public key"),
    LookAlike("libpq_without_password", "host=db port=5432 dbname=app user=app sslmode=require", "conninfo"),
    LookAlike(
        "dpkg_package_arch",
        "status installed google-cloud-cli-gke-gcloud-auth-plugin:amd64 528.0.0-0",
        "pkg:arch",
    ),
    LookAlike("libsecret_package", "configure libsecret-common:all 0.21.4-1", "secret inside a package name"),
    LookAlike("host_port", "upstream auth.example.com:443 and auth-server:9000", "host:port"),
    LookAlike("k8s_secret_name", "secretName: db-creds\nsecret_name: tls-cert", "names a secret"),
    LookAlike(
        "ssh_fingerprint",
        "ED25519 key fingerprint is SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s.",
        "hash",
    ),
    LookAlike("jwt_header_only", "alg header eyJhbGciOiJIUzI1NiJ9 only", "half a JWT"),
    LookAlike(
        "disk_service_name", "disk-usage-monitoring-service-prod-eu-west-1 running", "sk- inside a word"
    ),
    LookAlike(
        "key_path", "ssl_certificate_key /etc/ssl/private/server.key; private_key_path: /etc/k.pem", "a path"
    ),
    LookAlike("requirepass_in_prose", "# requirepass is not set by default", "directive named in a comment"),
    LookAlike("cookie_domain", "cookie_domain: .example.com\nsession: c2 (seat0)", "describes a cookie"),
    LookAlike("password_encryption", "password_encryption = 'scram-sha-256'", "a setting about passwords"),
    LookAlike("rolpassword_query", "SELECT rolname, rolpassword IS NOT NULL FROM pg_authid", "a column name"),
    LookAlike("valid_until", "ALTER ROLE r VALID UNTIL '2030-01-01'", "a quoted date in a role statement"),
    LookAlike("password_null", "ALTER ROLE r PASSWORD NULL; SELECT 'password'", "no password given"),
    LookAlike("url_port_at_end", "listening on http://localhost:8080", "a port, not a password, at the end"),
    LookAlike("url_ipv6_port", "proxy http://[::1]:3128", "an IPv6 host and a port"),
    LookAlike("url_port_then_at_path", "https://registry.npmjs.org:443/@types/node", "@ in the path"),
    LookAlike("docker_run_p", "docker run -d -p 8080:80 --name web nginx", "-p is a port outside login"),
    LookAlike("session_id", "session_id=42 seat0 uid=1000", "logind's session number"),
    LookAlike("yaml_block_other_key", "description: |\n  a long text\n", "a block scalar, not a secret"),
    LookAlike("add_key_plain", '<add key="Timeout" value="30"/>', "an appSettings entry not secret"),
    LookAlike("passwd_line", "root:x:0:0:root:/root:/bin/bash", "/etc/passwd, not .pgpass"),
    LookAlike("time_colons", "12:30:45:123:worker ready", "a timestamp"),
    LookAlike("auth_in_prose", "AUTH failed for user bob from 10.0.0.1", "not a Redis AUTH command"),
    LookAlike("sqlplus_os_auth", "sqlplus / as sysdba", "no password"),
    LookAlike("jdbc_oracle_no_user", "jdbc:oracle:thin:@//db:1521/orcl", "no user/password"),
    LookAlike("zip_recursive", "zip -r out.zip dir && unzip -l out.zip", "zip without -P"),
    LookAlike("7z_prompt", "7z x -p archive.7z", "-p alone: 7z prompts"),
    LookAlike("mosquitto_port", "mosquitto_sub -h broker -p 1883 -t x", "-p is the port"),
    LookAlike("redis_get_auth", "redis-cli get auth", "a key named auth"),
    LookAlike("redis_no_auth_warning", "redis-cli --no-auth-warning -h auth-cache ping", "auth inside words"),
    LookAlike("rabbitmq_list_users", "rabbitmqctl list_users --formatter json", "no password"),
    LookAlike("nmcli_ask", "nmcli --ask dev wifi connect HomeNet", "nmcli prompts"),
    LookAlike("aws_configure_get", "aws configure get aws_secret_access_key --profile dev", "reads it"),
    LookAlike("etcdctl_prompt", "etcdctl --user root get /k", "no :PW: etcdctl prompts"),
    LookAlike("password_in_prose", "set the password in the admin console", "no program named"),
    LookAlike(
        "mysqladmin_warning",
        "mysqladmin: [Warning] Using a password on the command line interface can be insecure.",
        "mysqladmin's own message",
    ),
    LookAlike(
        "aws_key_assignment_redacted",
        "aws configure list; aws_secret_access_key = [REDACTED]",
        "already redacted",
    ),
    LookAlike("redis_host_named_auth", "redis-cli -h auth ping", "a host named auth: the value of -h"),
    LookAlike(
        "redis_acl_hash", "redis-cli ACL SETUSER bob on #" + "5e88" * 16 + " ~*", "a hash, no password"
    ),
    LookAlike("net_prompt", "net ads join -U admin", "no %PW: net prompts"),
    LookAlike("lftp_prompt", "lftp -u bob ftp.example.com", "no ,PW: lftp prompts"),
    LookAlike("xfreerdp_no_password", "xfreerdp /v:host /u:bob /cert:ignore", "no /p:"),
    LookAlike("rdesktop_stdin", "rdesktop -u bob -p - host", "-p -: the password comes on stdin"),
    LookAlike("rar_no_password", "rar a -p- x.rar dir", "-p-: no password"),
    LookAlike("openssl_kfile", "openssl enc -aes-256-cbc -kfile key.txt -in a", "a file, not a password"),
    LookAlike(
        "snmp_v3_no_auth",
        "snmpwalk -v3 -l noAuthNoPriv -u bob -a SHA -x AES host",
        "protocols, no passphrase",
    ),
    LookAlike("snmpd_config", "snmpd -c /etc/snmp/snmpd.conf -Lsd", "snmpd's -c is its config file"),
    LookAlike("isql_dsn_only", "isql MyDSN -v", "no user or password on the line"),
    LookAlike("isql_in_prose", "the isql client is installed", "not at the start of a command line"),
    LookAlike("mc_alias_list", "mc alias list myminio", "no keys"),
    LookAlike("vault_login_method", "vault login -method=userpass username=bob", "vault prompts"),
    LookAlike("vault_login_alone", "vault login", "vault prompts"),
    LookAlike("sqlplus_script_arg", "sqlplus -s @report.sql reports/out.csv", "a path, not a logon"),
    LookAlike("curl_user_alone", "curl -u alice https://x", "no colon: curl prompts"),
    LookAlike(
        "curl_second_user_prompt", "curl -u alice --proxy-user bob https://x", "neither has a password"
    ),
    LookAlike("mc_admin_user_list", "mc admin user list ALIAS", "no keys"),
    LookAlike("mc_admin_user_add_no_secret", "mc admin user add myminio AKEXAMPLE", "no secret key given"),
    LookAlike("mc_admin_group_add", "mc admin group add myminio devs alice bob", "members, not keys"),
    LookAlike("mc_svcacct_add", "mc admin user svcacct add myminio bob", "a user, not a key"),
    LookAlike("isql_verbose_dsn", "isql -v DSN", "no user or password"),
    LookAlike("isql_help", "isql --help", "no password"),
    LookAlike("isql_sybase_prompt", "isql -U sa -S SYBASE -D master", "no -P: isql prompts"),
    LookAlike("sudo_isql_no_password", "sudo isql -v MyDSN bob", "no password: the DSN's"),
    LookAlike("vault_login_github", "vault login -method=github", "vault prompts"),
    LookAlike("vault_login_stdin_flags", "vault login - -no-print", "the token comes on stdin"),
    LookAlike("mc_config_host_list", "mc config host list myminio", "no keys"),
    LookAlike("mc_config_host_remove", "mc config host remove myminio", "no keys"),
    LookAlike(
        "ldappasswd_prompts", "ldappasswd -x -D cn=admin,dc=ex -W -A -S uid=bob,dc=ex", "-W -A -S prompt"
    ),
    LookAlike("ldapsearch_scope_deref", "ldapsearch -x -s sub -a always -b dc=ex", "scope and deref"),
    LookAlike("sqsh_prompt", "sqsh -U sa -S SYBASE -D master", "no -P: sqsh prompts"),
    LookAlike("sqsh_empty_password", "sqsh -U sa -P -S SYBASE", "-P then a flag: an empty password"),
    LookAlike(
        "vault_login_in_a_log", "2024-05-01 deploy: vault login failed: permission denied", "not a command"
    ),
    LookAlike("vault_login_then_command", "vault login -method=oidc && vault status", "no token"),
    # a number, a user or a time before a program's name at a line's start is no ps line
    LookAlike("isql_after_a_small_number", "3 isql sessions were open today", "a count, not a PID"),
    LookAlike("isql_after_words", "Found 12 isql DSN entries in odbc.ini today", "prose"),
    LookAlike("isql_after_user_and_number", "root 42 isql ran with user bob", "not ps's columns"),
    LookAlike("isql_after_a_time", "10:00 isql sessions peaked at noon today", "a time, not a PID"),
    LookAlike("isql_after_glued_semicolon", "notes; isql is the unixODBC client for DSNs", "prose"),
    LookAlike(
        "ps_ef_without_password", "root  1234  1  0 10:00 ?  00:00:00 isql -v MyDSN bob", "no password"
    ),
    LookAlike("sshpass_file_ssh_port", "sshpass -f /run/pw ssh -p 2222 host", "ssh's -p is a port"),
    LookAlike("sshpass_env_ssh_port", "sshpass -e ssh -p 2222 host", "ssh's -p is a port"),
    LookAlike("docker_login_prompt_then_run", "docker login ghcr.io && docker run -p 8080:80 img", "a port"),
    LookAlike("docker_login_prompt_then_pipe", "docker login ghcr.io | docker run -p 8080:80 img", "a port"),
    LookAlike("docker_login_prompt_or_run", "docker login ghcr.io || docker run -p 8080:80 img", "a port"),
    LookAlike("mysql_then_ls", "mysql -h db shop && ls -plh /var/lib/mysql", "ls's flags"),
    LookAlike("snmpwalk_then_grep", "snmpwalk -v3 -l noAuthNoPriv -u bob h | grep -c ifDescr", "grep's -c"),
    LookAlike("redis_cli_then_auth_word", "redis-cli -h cache ping && echo auth ok", "echo's words"),
    LookAlike(
        "ldapsearch_password_file_clustered",
        "ldapsearch -xy /etc/ldap.secret -D cn=admin,dc=x -b dc=x",
        "-y names a file holding the password",
    ),
    LookAlike(
        "ldapsearch_prompt_clustered", "ldapsearch -ZZxW -D cn=admin,dc=x -b dc=x uid=bob", "-W prompts"
    ),
    LookAlike(
        "ldapsearch_then_grep_w",
        "ldapsearch -xLLL -b dc=x uid | grep -iw uid",
        "grep's -w: clusters are read for the ldap tools only, in their command",
    ),
    LookAlike("dpkg_sshpass", "2024-05-01 10:00:00 status installed sshpass:amd64 1.09-1", "the package"),
    LookAlike(
        "vault_login_failed_at_line_start",
        "vault login failed: permission denied for user bob",
        "a log message: 'failed:' is no token",
    ),
    LookAlike(
        "vault_login_succeeded_mid_line",
        "2024-05-01 deploy: vault login succeeded for role web",
        "prose: no token's shape before more words",
    ),
    LookAlike("bindpw_in_prose", "the bindpw option sets the password nslcd binds with", "not a directive"),
    LookAlike("rootpw_in_prose", "set rootpw in slapd.conf to a hash", "not at a line's start"),
    LookAlike("nslcd_rootpwmoddn", "rootpwmoddn cn=admin,dc=example,dc=com", "a DN, not a password"),
    LookAlike("kickstart_rootpw_lock", "rootpw --lock", "root's password locked: none given"),
    LookAlike("password_format_field", "password={password} user={user}", "a template's placeholder"),
    LookAlike("etcdctl_user_env_prompt", "ETCDCTL_USER=root etcdctl get /k", "no :PW: etcdctl prompts"),
    LookAlike("timestamp_then_count", "2024-05-01T10:00:00Z +3 isql sessions since noon", "no xtrace prefix"),
    LookAlike(
        "timestamp_xtrace_count", "2024-05-01T10:00:00Z + 3 isql sessions were open", "a count, not a command"
    ),
    LookAlike(
        "source_in_prose_semicolon", "open source tools; isql is the unixODBC client for DSNs", "prose"
    ),
    LookAlike("set_in_prose_semicolon", "a set of tools; isql is the unixODBC client for DSNs", "prose"),
    LookAlike("export_in_prose_semicolon", "we export data; isql is the unixODBC client for DSNs", "prose"),
    LookAlike("cd_without_dir_semicolon", "burn a cd; isql is the unixODBC client for DSNs", "prose"),
    # LDIF values in base64 whose attribute is no secret; "::" in code
    LookAlike("ldif_dn_base64", "dn:: Y249Ym9iLGRjPWV4YW1wbGUsZGM9Y29t\nobjectClass: person\n", "a DN"),
    LookAlike("ldif_description_base64", "description:: w6l0w6kgw6AgUGFyaXM=\n", "not ASCII, no secret"),
    LookAlike(
        "ldif_base64_then_folded_attribute",
        "cn:: w6l0w6k=\n w6A=\ndescription: x\n",
        "a folded value of an attribute that is no secret",
    ),
    LookAlike("ruby_constant_auth", "uninitialized constant Auth::Token (NameError)", "a scope, no value"),
    LookAlike("cpp_scope_password", "at Password::validate(const std::string&) line 42", "a scope"),
    # sssd and PAM: a kind of token, a module option without a value, sssd's debug lines
    LookAlike("sssd_authtok_type", "ldap_default_authtok_type = obfuscated_password", "a kind of token"),
    LookAlike(
        "pam_sss_use_authtok",
        "password sufficient pam_sss.so use_authtok\nauth sufficient pam_unix.so nullok try_first_pass",
        "a module option, no value",
    ),
    LookAlike(
        "sssd_debug_authtok_type",
        "(2024-05-01 10:00:00): [pam] [pam_print_data] (0x0100): authtok type: 1 (Password)",
        "sssd's debug line: the kind of token",
    ),
    # commented-out lines of the default nslcd.conf, pam_ldap.conf and redis.conf
    LookAlike("nslcd_conf_commented_rootpwmoddn", "#rootpwmoddn cn=admin,dc=example,dc=com", "a DN"),
    LookAlike("pam_ldap_conf_commented_rootbinddn", "#rootbinddn cn=manager,dc=padl,dc=com", "a DN"),
    LookAlike(
        "nslcd_conf_bindpw_note",
        "# Note that if you set a bindpw you should check the permissions of this file.",
        "bindpw mid-comment: prose",
    ),
    LookAlike(
        "redis_conf_requirepass_note",
        "# The requirepass is not compatible with aclfile option and the ACL LOAD",
        "requirepass mid-comment: prose",
    ),
    LookAlike("kickstart_commented_rootpw_lock", "#rootpw --lock", "no password given"),
    # a count and a time are no history line; a command word mid-sentence starts no command
    LookAlike(
        "count_then_time_isql", "3 2024-05-01 10:00:00 isql sessions were open", "not history's columns"
    ),
    LookAlike("echo_in_prose_semicolon", "we echo start; isql is the unixODBC client for DSNs", "prose"),
    LookAlike("date_in_prose_semicolon", "set the date; isql is the unixODBC client for DSNs", "prose"),
    LookAlike("ls_in_prose_semicolon", "run ls; isql is the unixODBC client for DSNs", "prose"),
    # debconf answers of other types, a password question's flag, an empty answer; debconf-show
    LookAlike(
        "preseed_string_and_boolean_answers",
        "d-i passwd/user-fullname string Bob Smith\nd-i passwd/username string bob\n"
        "d-i passwd/make-user boolean true\ntzdata tzdata/Areas select Europe\n",
        "not of type password",
    ),
    LookAlike(
        "debconf_seen_flag", "mysql-server mysql-server/root_password seen true", "a flag set, not an answer"
    ),
    LookAlike(
        "debconf_empty_password",
        "mysql-server-8.0\tmysql-server/root_password\tpassword\t\n"
        "mysql-server-8.0\tmysql-server/data-dir\tnote\t\n",
        "no answer given",
    ),
    LookAlike(
        "debconf_show_password_omitted",
        "* mysql-server/root_password: (password omitted)\n  mysql-server/remove-data-dir: false",
        "debconf-show leaves passwords out",
    ),
    LookAlike(
        "preseed_comment_prose",
        "# Root password, either in clear text\n# or encrypted using a crypt(3)  hash.",
        "prose",
    ),
    LookAlike(
        "debconf_config_dat_fullname",
        "Name: passwd/user-fullname\nTemplate: passwd/user-fullname\nValue: Bob Smith\nOwners: d-i\n",
        "the question's own name (after passwd/) is no secret",
    ),
    LookAlike(
        "debconf_record_without_value",
        "Name: mysql-server/root_password\nTemplate: mysql-server/root_password\nOwners: mysql-server-8.0\n\n"
        "Name: tzdata/Areas\nTemplate: tzdata/Areas\nValue: Europe\nOwners: tzdata\n",
        "the next record's value is not the password question's",
    ),
    # comments mentioning a directive; a count and a command in tab-separated columns
    LookAlike("double_hash_bindpw_note", "## Note: set a bindpw only in nslcd.conf", "prose"),
    LookAlike(
        "commented_requirepass_prose_two_blanks",
        "#  requirepass is not set by default",
        "requirepass commented out with more words: prose",
    ),
    LookAlike("semicolon_bindpw_note", "; the bindpw option is read by nslcd", "prose"),
    LookAlike("tsv_count_isql", "5\tisql\tsessions were open", "no TAB and blank or * of fc -l"),
    # Kerberos entries' names, dates and counts
    LookAlike(
        "ldif_kerberos_principal_entry",
        "krbPrincipalName: bob@EXAMPLE.COM\nkrbLastPwdChange: 20240501100000Z\n"
        "krbPasswordExpiration: 20250501100000Z\nkrbExtraData:: AAJUbPVlYm9iQEVYQU1QTEUuQ09NAA==\n"
        "krb5KeyVersionNumber: 2\nsambaPwdLastSet: 1714557600\n",
        "names, dates, counts: no key",
    ),
    # prose after a ";" (isql not a command's start, or words after its third item); no password
    LookAlike("echo_isql_after_semicolon", "cat notes.txt; echo isql is a client", "echo's words"),
    LookAlike(
        "isql_prose_after_a_command_semicolon",
        "cat notes.txt; isql is the unixODBC client for DSNs",
        "more words after the third: prose",
    ),
    LookAlike("isql_failed_after_semicolon", "the job stopped; isql failed for user bob again", "prose"),
    LookAlike("isql_dsn_only_after_semicolon", "cat /etc/odbc.ini; isql -v MyDSN", "no user or password"),
    LookAlike("isql_user_only_after_semicolon", "grep -c x a.log; isql MyDSN bob -v", "no password"),
    LookAlike("then_isql_prose", "if it fails; then isql prints the ODBC error first", "prose"),
    # indented lines that start no isql command
    LookAlike(
        "yaml_isql_client_paths", "clients:\n  isql: /usr/bin/isql\n  sqsh: /usr/bin/sqsh\n", "YAML keys"
    ),
    LookAlike("indented_isql_mention", "    the isql client is installed\n", "isql is not the first word"),
    LookAlike("indented_isql_dsn_only", "  isql -v MyDSN\n\tisql --help\n", "no password"),
    # quoted debconf lines of other types, without an answer, or prose naming a question
    LookAlike(
        "printf_debconf_seen_flag",
        "printf '%s\\n' 'mysql-server mysql-server/root_password seen true' | debconf-set-selections",
        "a flag, not an answer",
    ),
    LookAlike(
        "printf_debconf_select_answer",
        "printf '%s\\n' 'tzdata tzdata/Areas select Europe' | debconf-set-selections",
        "not of type password",
    ),
    LookAlike(
        "quoted_debconf_without_answer",
        "printf '%s\\n' 'pkg pkg/q password' | debconf-set-selections",
        "no answer given",
    ),
    LookAlike(
        "quoted_debconf_question_prose",
        'echo "preseed the mysql-server/root_password question first"',
        "no password type after the question",
    ),
    # config.dat records whose question is a confirmation of no password; config.dat named
    LookAlike(
        "debconf_config_dat_confirm_boolean",
        "Name: apt-listchanges/confirm\nTemplate: apt-listchanges/confirm\nValue: false\n"
        "Owners: apt-listchanges\nFlags: seen\n",
        "a boolean question named confirm",
    ),
    LookAlike(
        "debconf_config_dat_named_by_head",
        "==> /var/cache/debconf/config.dat <==\nName: tzdata/Areas\nTemplate: tzdata/Areas\n"
        "Value: Europe\nOwners: tzdata\n",
        "config.dat holds no passwords",
    ),
    # comments naming requirepass or masterauth, then prose
    LookAlike(
        "commented_requirepass_must_prose",
        "# requirepass must be set before the port is opened",
        "a prose word after the directive's name",
    ),
    LookAlike(
        "commented_masterauth_and_prose",
        "#masterauth and requirepass are ignored with an aclfile\n; masterauth is read by replicas only",
        "prose words after the directive's name",
    ),
    # Wi-Fi: key management names, flags, files, prose, empty keys
    LookAlike(
        "wpa_supplicant_key_mgmt",
        'network={\n\tssid="HomeNet"\n\tkey_mgmt=WPA-PSK\n\tproto=RSN\n\tpairwise=CCMP\n\twep_tx_keyidx=0\n}',
        "psk as a key-management value, a key index",
    ),
    LookAlike(
        "networkmanager_secret_flags",
        "[wifi-security]\nkey-mgmt=wpa-psk\npsk-flags=1\n\n[802-1x]\npassword-flags=2\n",
        "psk-flags and password-flags say where the secret is kept (an agent), not what it is",
    ),
    LookAlike(
        "nmcli_secrets_hidden",
        "802-11-wireless-security.psk:           <hidden>\n802-11-wireless-security.psk-flags:     0 (none)",
        "nmcli without --show-secrets",
    ),
    LookAlike(
        "hostapd_psk_file", "wpa_psk_file=/etc/hostapd/hostapd.wpa_psk\nwpa_key_mgmt=WPA-PSK", "a file"
    ),
    LookAlike(
        "wpa_psk_empty",
        'psk=""\npsk=\n# wpa-psk is the passphrase, 8 to 63 characters\n',
        "empty keys, and prose after a commented-out directive",
    ),
    LookAlike(
        "psk_in_prose",
        "The psk option sets the WPA pre-shared key; see wpa_supplicant.conf(5).",
        "the key's name in documentation",
    ),
    # key blocks: public keys, OpenVPN's own words, age's public keys and docs
    LookAlike(
        "ssh2_public_key_block",
        '---- BEGIN SSH2 PUBLIC KEY ----\nComment: "rsa-key-20240501"\nAAAAB3NzaC1yc2EAAAADAQABAAABAQC7\n'
        "---- END SSH2 PUBLIC KEY ----",
        "RFC 4716's public key",
    ),
    LookAlike(
        "openvpn_log_and_directives",
        "OpenVPN 2.6.3 x86_64-pc-linux-gnu [SSL (OpenSSL)] [LZO] [LZ4]\ntls-auth /etc/openvpn/ta.key 1\n"
        "tls-crypt-v2 /etc/openvpn/client.key\nkey-direction 1",
        "OpenVPN's version line and key file paths",
    ),
    LookAlike(
        "age_public_key_and_docs",
        "# public key: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\n"
        "identity files hold lines starting with AGE-SECRET-KEY-1",
        "age's public key, the secret key's prefix in prose",
    ),
    # mail and dial-up: postfix's other maps, msmtp's other directives, PAM, pppd's comments
    LookAlike(
        "postfix_transport_and_relay_maps",
        "bob@example.com smtp:[mail.example.com]:587\n@example.com [smtp.example.com]:587\n"
        "relayhost = [smtp.gmail.com]:587\nsmtp_sasl_auth_enable = yes",
        "a transport map, a sender-dependent relay map, main.cf",
    ),
    LookAlike(
        "host_port_lines",
        "Listen 127.0.0.1:8080\nserver backend1.example.com:8080 weight=5;\ndb1.example.com state:OK\n"
        '10.0.0.1 - - [01/May/2024:10:00:00 +0000] "GET / HTTP/1.1" 200 612',
        "host and colon lines that are no sasl_passwd",
    ),
    LookAlike(
        "msmtprc_without_password",
        "account gmail\nhost smtp.gmail.com\nauth on\npasswordeval gpg --no-tty -q -d ~/.msmtp-password.gpg\n",
        "msmtp's passwordeval runs a command",
    ),
    LookAlike(
        "password_state_lines",
        'password changed\npassword   requisite   pam_pwquality.so retry=3\npassword is required\npassword ""\n'
        "  password ********",
        "a state, PAM's password stack, prose, an empty or masked password",
    ),
    LookAlike(
        "ppp_secrets_comments_only",
        "# Secrets for authentication using CHAP\n# client\tserver\tsecret\t\t\tIP addresses\n",
        "pppd's header comment alone",
    ),
    LookAlike(
        "ppp_secrets_prose",
        "Edit /etc/ppp/chap-secrets as root, then restart pppd.\n"
        "Each line of it gives a client, a server, a secret and addresses.",
        "the file named in prose",
    ),
    # services: pgbouncer, snmpd, haproxy, rsyncd, php-fpm settings without secrets
    LookAlike(
        "pgbouncer_settings",
        'auth_file = /etc/pgbouncer/userlist.txt\nauth_type = scram-sha-256\n"appuser" ""',
        "the userlist's path, an empty password",
    ),
    LookAlike(
        "snmpd_conf_docs",
        "#  rocommunity: a SNMPv1/SNMPv2c read-only access community name\n"
        "#   createUser username (MD5|SHA) passphrase [DES|AES] [passphrase]\n"
        "# rocommunity is not needed with SNMPv3\nview systemonly included .1.3.6.1.2.1.1\n"
        "rouser authPrivUser authpriv -V systemonly",
        "snmpd.conf's comments, views and users without their passphrases",
    ),
    LookAlike(
        "haproxy_stats_settings",
        "listen stats\n    stats enable\n    stats uri /stats\n    stats refresh 10s\n    stats admin if LOCALHOST",
        "stats directives without auth",
    ),
    LookAlike(
        "rsyncd_conf",
        "secrets file = /etc/rsyncd.secrets\n[backup]\n    path = /srv/backup\n    auth users = alice",
        "the secrets file named in rsyncd.conf",
    ),
    LookAlike(
        "php_fpm_settings",
        "env[PATH] = /usr/local/bin:/usr/bin:/bin\nphp_admin_value[memory_limit] = 256M\n"
        "$cfg['Servers'][$i]['auth_type'] = 'cookie';",
        "bracketed names that are no secret",
    ),
    # Java: properties without a secret value
    LookAlike(
        "spring_properties_without_secret",
        '<property name="username" value="app"/>\n<property name="passwordEncoder" ref="bcryptEncoder"/>\n'
        '<entry key="password.minLength">12</entry>\n<entry key="db.password"></entry>\n'
        '<property name="password" value=""/>',
        "no secret value: a reference, a policy, empty values",
    ),
    # hashes: locked accounts, the schemes named in prose
    LookAlike(
        "shadow_locked_accounts",
        "daemon:*:19800:0:99999:7:::\nbin:!:19800::::::\nsshd:!*:19800::::::\nENCRYPT_METHOD SHA512",
        "no hash: locked accounts, login.defs",
    ),
    LookAlike(
        "crypt_ids_in_prose",
        "echo $1$2 and crypt(3) hashes start with $6$ for SHA-512 and $y$ for yescrypt",
        "a shell's arguments, the scheme ids in prose",
    ),
    # secret URLs: placeholders, channels
    LookAlike(
        "telegram_and_discord_docs",
        "https://api.telegram.org/bot{token}/sendMessage\nhttps://core.telegram.org/bots/api#sendmessage\n"
        "https://discord.com/api/webhooks/{webhook.id}/{webhook.token}\n"
        "https://discord.com/channels/123456789012345678/987654321098765432",
        "placeholders, docs and a channel's URL",
    ),
    LookAlike("clock_times", "10:00:05 up 3 days, 12:34:56 load average: 0.10", "colons and digits"),
    # URL-encoded: a port, a name in a path, a name that is no secret
    LookAlike(
        "encoded_urls_without_credentials",
        "redirect_uri=https%3A%2F%2Fapp.example.com%3A8443%2Fcallback\nGET /docs/password%20reset HTTP/1.1\n"
        "GET /login?passwordless%3Dtrue HTTP/1.1",
        "an encoded port, a path, a name ending otherwise",
    ),
    # chpasswd from a file, a pipe to another program
    LookAlike(
        "chpasswd_from_a_file",
        "chpasswd < users.txt\nchpasswd -e < /root/hashes\necho 'alice:x' | grep alice",
        "no password on the line",
    ),
    # programs: prompts, no secret flags, configmaps
    LookAlike(
        "ssh_keygen_without_passphrase",
        'ssh-keygen -t ed25519 -N "" -f ~/.ssh/id_ed25519\nssh-keygen -lf ~/.ssh/id_ed25519.pub\n'
        "ssh-keygen -t rsa -N '' -C deploy",
        '-N "": no passphrase',
    ),
    LookAlike(
        "programs_without_secrets",
        "wpa_passphrase HomeNet < /run/wifi-pass\naws s3 cp a s3://b/ --sse-c AES256\n"
        "rabbitmqadmin -H rabbit -P 15672 list queues\ncqlsh 10.0.0.5 9042 -e 'DESCRIBE KEYSPACES'\n"
        "consul keygen\nngrok http 8080\nfrpc -c /etc/frp/frpc.toml\nencrypt = true",
        "a passphrase on stdin, an algorithm, a port, no secret",
    ),
    LookAlike(
        "grafana_cli_without_password",
        "grafana-cli plugins install grafana-clock-panel\n"
        "grafana-cli --homepath /usr/share/grafana admin reset-admin-password --password-from-stdin < /run/gf\n"
        "grafana cli admin reset-admin-password --password-from-stdin\n"
        "grafana-server --homepath /usr/share/grafana --config /etc/grafana/grafana.ini\n"
        "grafana cli admin data-migration encrypt-datasource-passwords",
        "plugins, the password on stdin, the server, a migration",
    ),
    LookAlike(
        "az_without_secrets",
        "az login --use-device-code\naz login --identity -u 0f1e2d3c\naz account show -o table\n"
        "az deployment group create -g rg -f main.bicep -p @params.json\naz acr login --name myreg\n"
        "az storage blob list --account-name acct --auth-mode login -c logs",
        "device code, a managed identity, az deployment's -p is its parameters, no -p",
    ),
    # a refusal about a file whose name says secret: the path and the message stay
    LookAlike(
        "refusals_about_files_named_like_secrets",
        "/tmp/atk-data/logs/./secrets.log: not a directory\n"
        "/tmp/atk-data/logs/./secrets.log: not a regular file\n"
        "/tmp/atk-data/logs/./secrets.log is a directory\n"
        "/srv/app/secrets.yaml: no such file\n/srv/app/api-token.json: cannot open (Is a directory)\n"
        "/etc/app/credentials.ini: not a regular file\x00/etc/ssl/private/secret.pem: PEM certificate",
        "a path ending with a file's name, then a message",
    ),
    LookAlike(
        "kubectl_configmap_literal",
        "kubectl create configmap app --from-literal=LOG_LEVEL=debug\nkubectl get secret db -o yaml",
        "a configmap's literal; reading a secret",
    ),
    LookAlike(
        "redis_forks_without_password",
        "valkey-cli -h cache -p 6380 info memory\nredis-benchmark -t set,get -n 100000 -q\nkeydb-cli get auth",
        "no -a, a key named auth",
    ),
    LookAlike(
        "mariadb_access_denied_yes",
        "ERROR 1045 (28000): Access denied for user 'root'@'127.0.0.1' (using password: YES)",
        "whether a password was sent",
    ),
    LookAlike(
        "mysql_access_denied_no",
        "[Warning] Access denied for user 'app'@'localhost' (using password: NO)",
        "whether a password was sent",
    ),
    # PHP's define: empty, a call or a variable, WordPress's sample placeholder, a name that is no secret
    LookAlike(
        "php_defines_without_secrets",
        "define( 'DB_PASSWORD', '' );\ndefine( 'DB_PASSWORD', getenv('WORDPRESS_DB_PASSWORD') );\n"
        "define('DB_PASSWORD', $_ENV['DB_PASSWORD']);\ndefine(\"DB_PASSWORD\", \"$password\");\n"
        "define( 'AUTH_KEY',         'put your unique phrase here' );\ndefine( 'WP_DEBUG', false );\n"
        "define('PASSWORD_RESET_URL', 'https://example.com/reset');\n"
        "Set the define('DB_PASSWORD', ...) line in wp-config.php",
        "empty, a call, variables, the sample's placeholder, a URL's name, prose",
    ),
    # a variable read without a default, a default that is no secret
    LookAlike(
        "env_reads_without_secret_defaults",
        "password = os.getenv('APP_PASSWORD')\n    'password' => env('DB_PASSWORD'),\n"
        "    'host' => env('DB_HOST', '127.0.0.1'),\n    'password' => env('DB_PASSWORD', ''),",
        "no default, a host's, empty",
    ),
    # fetchmail: no password (it prompts), prose
    LookAlike(
        "fetchmail_without_password",
        'poll mail.example.com protocol imap user alice\npoll mail.example.com user "alice" password ""\n'
        "user alice changed her password yesterday\nuser alice with password reset\n"
        "# fetchmail sends the password in clear unless ssl is set\npassword is not set here",
        "fetchmail prompts, an empty password, prose",
    ),
    # web.xml: params that are no secret, a placeholder, empty
    LookAlike(
        "web_xml_params_without_secrets",
        "<param-name>contextConfigLocation</param-name>\n<param-value>/WEB-INF/app.xml</param-value>\n"
        "<param-name>passwordPolicy</param-name><param-value>strict</param-value>\n"
        "<param-name>password</param-name><param-value>${db.password}</param-value>\n"
        "<param-name>password</param-name><param-value></param-value>",
        "other params, a placeholder, empty",
    ),
    # passwd: from a variable, a file, no pipe
    LookAlike(
        "passwd_without_a_password",
        'echo "$NEW_PASSWORD" | passwd --stdin alice\npasswd --stdin alice < /root/pw.txt\n'
        "printf '%s\\n' \"$PW\" | passwd --stdin alice\npasswd -l alice\n"
        'echo "changing password" && passwd alice\necho done | tee passwd.log',
        "a variable, a file, prose",
    ),
    # openssl passwd: from stdin or a file, a variable
    LookAlike(
        "openssl_passwd_without_plaintext",
        'openssl passwd -6 -stdin < pw.txt\nopenssl passwd -6 -in /root/pw.txt\nopenssl passwd -6 "$PW"\n'
        "openssl passwd -help\nopenssl passwd [-1|-5|-6|-apr1] [-salt string] [-stdin] {password}",
        "the plaintext read elsewhere, a synopsis",
    ),
    # ipsec.secrets: a key without passphrase or prompting for one, an empty PSK, charon's log
    LookAlike(
        "ipsec_secrets_without_secrets",
        ': RSA moonKey.pem\n: RSA moonKey.pem %prompt\n: PSK ""\ninclude /etc/ipsec.d/*.secrets\n'
        "charon: 05[CFG] loading secrets from '/etc/ipsec.secrets'\n"
        "charon: 05[CFG]   loaded IKE secret for %any\n"
        "charon: 10[IKE] authentication of 'moon' (myself) with pre-shared key successful",
        "no passphrase, a prompt, empty, a log",
    ),
    # snmpd: a sink with the default community, the docs' synopsis, prose
    LookAlike(
        "snmp_trap_sinks_without_community",
        "trap2sink localhost\n#   trapsink HOST [COMMUNITY [PORT]]\n# trap2sink: where to send SNMPv2c traps\n"
        "authCommunity TYPES COMMUNITY [SOURCE [OID | -v VIEW ]]\nauthtrapenable 1\ntrapsess -v 2c nms",
        "no community, a synopsis, prose",
    ),
    # gossip: booleans, empty, templates and variables, ansible's algorithm
    LookAlike(
        "encrypt_settings_without_keys",
        'encrypt = ""\n"encrypt": false\n"encrypt": "true"\nencrypt = "${var.gossip_key}"\n'
        'encrypt = "{{ key \\"consul/gossip\\" }}"\nencrypt: sha512_crypt\nencrypt = var.gossip_key',
        "no key: a flag, empty, a reference, an algorithm",
    ),
    # an annotation is no value
    LookAlike(
        "python_annotations",
        "HAS_PSK: Final[bool] = True\npassword: Optional[str] = None\nUSE_TOKEN: bool = False",
        "a type and a flag",
    ),
    # calls, and values starting with a bracket: code and lists, no secret's word
    LookAlike(
        "calls_and_bracketed_values",
        "token: str = Field(...)\nsecret_key: str = Field(default=None)\npassword => env('DB_PASSWORD')\n"
        "password = os.getenv(PASSWORD_VAR)\n'password' => env(\nsecrets: [db-password, api-key]\n"
        "auth: {basic: true}\npassword=(see below)",
        "calls, a list, a map, a parenthesised note",
    ),
    # public keys and certificates printed as numbers; labels that are no private number's
    LookAlike(
        "openssl_x509_text",
        "        Serial Number:\n            77:b4:c7:d0:b4:ab:f2:b0:81:ef:40:d3:e4:6e:b5:36:1c:9e:13:ec\n"
        "                Public-Key: (512 bit)\n                Modulus:\n"
        "                    00:bf:65:46:1c:c7:d3:38:0e:f2:3c:96:8a:fc:cf:\n"
        "                    c4:9d:3f:b1:01\n                Exponent: 65537 (0x10001)\n"
        "                pub:\n                    04:be:b2:49:b7:55:4f:4a:84:f6:e6:df:2c:67:09:\n"
        "                    fa:37:27:49:c1\n                ASN1 OID: prime256v1\n"
        "    Signature Value:\n        16:69:17:dd:c5:86:4e:81:b1:99:20:c0:f1:68:98:49:06:5c:\n"
        "        89:7e:8c:c0:0f:9d:f1:ee:27:5a",
        "a certificate's serial, modulus, EC point and signature: public",
    ),
    LookAlike(
        "openssl_public_key_text",
        "Public-Key: (512 bit)\nModulus:\n    00:bf:65:46:1c:c7:d3:38:0e:f2:3c:96:8a:fc:cf:\n"
        "    c4:9d:3f:b1:01\nExponent: 65537 (0x10001)\n"
        "DH Parameters: (2048 bit)\n    prime:\n        00:ff:ff:ff:ff:ff:ff:ff:ff:ad:f8:54:58:a2:bb\n"
        "    generator: 2 (0x2)",
        "a public key and DH parameters",
    ),
    LookAlike(
        "private_number_labels_without_hex",
        "prime1: 17\ncoefficient: 0.95\nCoefficient: 0.95\nExponent1: 3\npriv:\n  ab: 1\n"
        "privateExponent: 65537 (0x10001)\nprime2:\n  - 3\n  Modulus: 0xa60f77",
        "numbers in prose or YAML, no private key's hex",
    ),
    # asn1parse of a certificate, a public key and parameters: nothing private in them
    LookAlike("asn1parse_certificate", f"$ openssl asn1parse -in cert.pem\n{ASN1_CERT}$ ", "a certificate"),
    LookAlike(
        "asn1parse_certificate_indented_dump",
        f"$ openssl asn1parse -i -dump -in cert.pem\n{ASN1_CERT_INDENT_DUMP}$ ",
        "a certificate: serial, names, dates, public key, extensions, signature",
    ),
    LookAlike(
        "asn1parse_public_key_and_parameters",
        ASN1_PUBLIC_KEY + ASN1_EC_EXPLICIT_PARAMS + ASN1_DSA_PARAMS,
        "a public key, an explicit curve (version 1, its base point an OCTET STRING), DSA's p, q, g",
    ),
    # post-quantum public keys as text, and the public seeds of EC and DH parameters
    LookAlike(
        "post_quantum_public_keys_text",
        f"ML-DSA-44 Public-Key:\n{ML_DSA_PUB}ML-KEM-768 Public-Key:\n{ML_KEM_EK}"
        f"SLH-DSA-SHA2-128s Public-Key:\n{SLH_DSA_PUB}",
        "public keys",
    ),
    LookAlike(
        "ec_and_dh_parameter_seeds",
        "Cofactor:  1 (0x1)\nSeed:\n    c4:9d:36:08:86:e7:04:93:6a:66:78:e1:13:9d:26:\n    b7:81:9f:7e:90\n"
        "G:\n    d6:d3:eb:51:df:40:25:8b\nSEED:\n    9f:87:dc:4a:1c:69:d6:d6:27:72:ff:f5:41:82:25:\n"
        "    6f:50:82:52:59:be:99:e7:c7:d8:4f:d1:22\npcounter: 153",
        "an explicit curve's and DH parameters' seeds: public",
    ),
)

ARGV_LOOK_ALIKES: tuple[ArgvLookAlike, ...] = (
    ArgvLookAlike("column_names", ("user", "password", "host"), "secret words outside a known program"),
    ArgvLookAlike("echo_words", ("echo", "auth", "password", "hunter2"), "no program that takes them"),
    ArgvLookAlike("sqlplus_os_auth", ("sqlplus", "/", "as", "sysdba"), "no password"),
    ArgvLookAlike("sqlplus_nolog", ("sqlplus", "-S", "/nolog"), "no logon"),
    ArgvLookAlike("sqlplus_script", ("sqlplus", "@script.sql"), "a script, not a logon"),
    ArgvLookAlike(
        "sqlplus_wallet", ("sqlplus", "/@wallet_alias", "@dir/report.sql"), "wallet login, no user"
    ),
    ArgvLookAlike("sqlplus_prompt", ("sqlplus", "scott@orcl"), "no password: sqlplus prompts"),
    ArgvLookAlike("sqlldr_control", ("sqlldr", "control=dir/load.ctl", "log=x/y.log"), "paths, not logons"),
    ArgvLookAlike("zip_recursive", ("zip", "-r", "out.zip", "dir"), "no -P"),
    ArgvLookAlike("unzip_pipe", ("unzip", "-p", "a.zip", "f.txt"), "-p pipes to stdout"),
    ArgvLookAlike("7z_prompt", ("7z", "x", "-p", "a.7z"), "-p alone prompts"),
    ArgvLookAlike("mosquitto_port", ("mosquitto_sub", "-p", "1883", "-t", "x"), "-p is the port"),
    ArgvLookAlike("redis_get_auth", ("redis-cli", "get", "auth"), "a key named auth, nothing after it"),
    ArgvLookAlike("redis_config_get", ("redis-cli", "config", "get", "requirepass"), "reads the setting"),
    ArgvLookAlike("htpasswd_delete", ("htpasswd", "-D", "f", "bob"), "no -b"),
    ArgvLookAlike("htpasswd_prompt", ("htpasswd", "-c", "-B", "f", "bob"), "no -b: htpasswd prompts"),
    ArgvLookAlike("rabbitmq_list", ("rabbitmqctl", "list_users"), "no password"),
    ArgvLookAlike("nmcli_ask", ("nmcli", "--ask", "dev", "wifi", "connect", "x"), "nmcli prompts"),
    ArgvLookAlike("aws_region", ("aws", "configure", "set", "region", "eu-west-1"), "not a secret setting"),
    ArgvLookAlike("aws_configure_get", ("aws", "configure", "get", "aws_secret_access_key"), "reads it"),
    ArgvLookAlike("etcdctl_prompt", ("etcdctl", "--user", "root", "get", "k"), "no :PW: etcdctl prompts"),
    ArgvLookAlike("mysqladmin_status", ("mysqladmin", "-uroot", "-p", "status"), "-p prompts"),
    ArgvLookAlike("redis_host_named_auth", ("redis-cli", "-h", "auth", "ping"), "a host named auth"),
    ArgvLookAlike("redis_acl_hash", ("redis-cli", "ACL", "SETUSER", "bob", "#" + "5e88" * 16), "a hash"),
    ArgvLookAlike("net_prompt", ("net", "ads", "join", "-U", "admin"), "no %PW: net prompts"),
    ArgvLookAlike("lftp_prompt", ("lftp", "-u", "bob", "ftp.x"), "no ,PW: lftp prompts"),
    ArgvLookAlike("xfreerdp_no_password", ("xfreerdp", "/v:host", "/u:bob"), "no /p:"),
    ArgvLookAlike("rdesktop_stdin", ("rdesktop", "-p", "-", "host"), "-p -: stdin"),
    ArgvLookAlike("rar_no_password", ("rar", "a", "-p-", "x.rar"), "-p-: no password"),
    ArgvLookAlike("openssl_kfile", ("openssl", "enc", "-kfile", "key.txt", "-in", "a"), "a file"),
    ArgvLookAlike(
        "snmp_v3_no_auth", ("snmpwalk", "-v3", "-l", "noAuthNoPriv", "-a", "SHA", "h"), "protocols"
    ),
    ArgvLookAlike("snmpd_config", ("snmpd", "-c", "/etc/snmp/snmpd.conf"), "snmpd's config file"),
    ArgvLookAlike("isql_dsn_user", ("isql", "MyDSN", "bob", "-v"), "no password: the DSN's"),
    ArgvLookAlike("mc_alias_remove", ("mc", "alias", "remove", "myminio"), "no keys"),
    ArgvLookAlike("vault_login_method", ("vault", "login", "-method=userpass", "username=bob"), "prompts"),
    ArgvLookAlike("vault_login_method_value", ("vault", "login", "-method", "oidc", "role=dev"), "no token"),
    ArgvLookAlike("vault_login_stdin", ("vault", "login", "-"), "the token comes on stdin"),
    ArgvLookAlike("sqlplus_script_arg", ("sqlplus", "-s", "@report.sql", "reports/out.csv"), "a path"),
    ArgvLookAlike("sqldr_paths", ("sqlldr", "a/b/c", "x.d/y"), "paths, not logons"),
    ArgvLookAlike("curl_user_alone", ("curl", "-u", "alice", "https://x"), "no colon: curl prompts"),
    ArgvLookAlike("mc_admin_user_list", ("mc", "admin", "user", "list", "ALIAS"), "no keys"),
    ArgvLookAlike("mc_admin_user_add_no_secret", ("mc", "admin", "user", "add", "m", "AK"), "no secret key"),
    ArgvLookAlike(
        "mc_admin_group_add", ("mc", "admin", "group", "add", "m", "devs", "amy", "bob"), "members"
    ),
    ArgvLookAlike("mc_svcacct_add", ("mc", "admin", "user", "svcacct", "add", "m", "bob"), "a user"),
    ArgvLookAlike("isql_verbose_dsn", ("isql", "-v", "DSN"), "no user or password"),
    ArgvLookAlike("isql_help", ("isql", "--help"), "no password"),
    ArgvLookAlike("isql_sybase_prompt", ("isql", "-U", "sa", "-S", "SYBASE", "-D", "master"), "prompts"),
    ArgvLookAlike("vault_login_github", ("vault", "login", "-method=github"), "vault prompts"),
    ArgvLookAlike("mc_config_host_remove", ("mc", "config", "host", "remove", "myminio"), "no keys"),
    ArgvLookAlike("ldappasswd_prompts", ("ldappasswd", "-x", "-W", "-A", "-S", "uid=bob"), "-W -A -S prompt"),
    ArgvLookAlike("ldapsearch_scope_deref", ("ldapsearch", "-s", "sub", "-a", "always"), "scope, deref"),
    ArgvLookAlike("sqsh_prompt", ("sqsh", "-U", "sa", "-S", "SYBASE"), "no -P: sqsh prompts"),
    ArgvLookAlike("sqsh_empty_password", ("sqsh", "-U", "sa", "-P", "-S", "SYBASE"), "an empty password"),
    ArgvLookAlike("sshpass_file_ssh_port", ("sshpass", "-f", "/run/pw", "ssh", "-p", "2222", "h"), "a port"),
    ArgvLookAlike("sshpass_env_ssh_port", ("sshpass", "-e", "ssh", "-p", "2222", "h"), "a port"),
    ArgvLookAlike(
        "ldapsearch_password_file_clustered",
        ("ldapsearch", "-xy", "/etc/ldap.secret", "-b", "dc=x"),
        "a file",
    ),
    ArgvLookAlike(
        "ldapsearch_prompt_clustered", ("ldapsearch", "-ZZxW", "-D", "cn=admin", "uid=bob"), "prompts"
    ),
    ArgvLookAlike(
        "grep_cluster_w", ("grep", "-rw", "needle", "/srv"), "clusters are read for ldap tools only"
    ),
    ArgvLookAlike("ssh_keygen_no_passphrase", ("ssh-keygen", "-t", "ed25519", "-N", "", "-f", "k"), "empty"),
    ArgvLookAlike("ssh_keygen_fingerprint", ("ssh-keygen", "-lf", "k.pub"), "no passphrase"),
    ArgvLookAlike("wpa_passphrase_stdin", ("wpa_passphrase", "HomeNet"), "the passphrase comes on stdin"),
    ArgvLookAlike("rabbitmqadmin_port", ("rabbitmqadmin", "-P", "15672", "list", "queues"), "-P is the port"),
    ArgvLookAlike("aws_sse_c_algorithm", ("aws", "s3", "cp", "a", "b", "--sse-c", "AES256"), "an algorithm"),
    ArgvLookAlike(
        "kubectl_configmap",
        ("kubectl", "create", "configmap", "app", "--from-literal=LOG_LEVEL=debug"),
        "no secret",
    ),
    ArgvLookAlike("kubectl_get_secret", ("kubectl", "get", "secret", "db", "-o", "yaml"), "reads it"),
    ArgvLookAlike(
        "grafana_plugins", ("grafana-cli", "plugins", "install", "grafana-clock-panel"), "a plugin"
    ),
    ArgvLookAlike(
        "grafana_password_stdin",
        ("grafana", "cli", "admin", "reset-admin-password", "--password-from-stdin"),
        "the password comes on stdin",
    ),
    ArgvLookAlike("az_login_device_code", ("az", "login", "--use-device-code"), "no password"),
    ArgvLookAlike("az_account_show", ("az", "account", "show", "-o", "table"), "no password"),
    ArgvLookAlike(
        "az_deployment_parameters",
        ("az", "deployment", "group", "create", "-g", "rg", "-f", "main.bicep", "-p", "@params.json"),
        "az deployment's -p is its parameters",
    ),
    ArgvLookAlike("ngrok_http", ("ngrok", "http", "8080"), "no token"),
    ArgvLookAlike("frpc_config", ("frpc", "-c", "/etc/frp/frpc.toml"), "a config file"),
    ArgvLookAlike("consul_dev", ("consul", "agent", "-dev"), "no key"),
    ArgvLookAlike("mariadb_dump_prompt", ("mariadb-dump", "-u", "root", "-p", "shop"), "-p prompts"),
    ArgvLookAlike("valkey_host_named_auth", ("valkey-cli", "-h", "auth", "ping"), "a host named auth"),
    ArgvLookAlike("redis_benchmark_counts", ("redis-benchmark", "-c", "50", "-n", "1000", "-q"), "numbers"),
    ArgvLookAlike("openssl_passwd_stdin", ("openssl", "passwd", "-6", "-stdin"), "read on stdin"),
    ArgvLookAlike("openssl_passwd_in", ("openssl", "passwd", "-6", "-in", "pw.txt"), "read from a file"),
    ArgvLookAlike("openssl_passwd_help", ("openssl", "passwd", "-help"), "no password"),
    ArgvLookAlike(
        "openssl_passwd_flags_only",
        ("openssl", "passwd", "-1", "-stdin", "-noverify", "-quiet", "-table", "-reverse"),
        "read on stdin, flags only",
    ),
    ArgvLookAlike(
        "openssl_passwd_as_a_file",
        ("openssl", "enc", "-in", "passwd", "-out", "x.enc"),
        "a file named passwd",
    ),
)
