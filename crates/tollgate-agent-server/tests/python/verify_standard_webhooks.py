"""Checks webhook deliveries with the `standardwebhooks` package from PyPI, as a receiver would.

Usage: verify_standard_webhooks.py CASES.json

CASES.json is a list of {"name", "secret", "headers", "body", "expect"}: `secret` as the receiver holds
it (`whsec_` + base64 of the key), `headers` as received (or changed, for a replay), `body` the exact body
text, `expect` "valid" or "invalid". Prints one line per case; exits 1 when any verdict differs.
"""

import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def verdict(case):
    try:
        Webhook(case["secret"]).verify(case["body"].encode("utf-8"), case["headers"])
    except WebhookVerificationError as error:
        return "invalid", str(error)
    return "valid", ""


def main(path):
    with open(path, encoding="utf-8") as file:
        cases = json.load(file)
    if not cases:
        print("no cases to check")
        return 1
    wrong = 0
    for case in cases:
        got, why = verdict(case)
        ok = got == case["expect"]
        wrong += not ok
        print(f"{'ok' if ok else 'WRONG'}: {case['name']}: {got} {why}".rstrip())
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
