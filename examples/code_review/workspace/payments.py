"""A small payments service (the sample workspace of the code-review example)."""

import sqlite3
import subprocess

STRIPE_KEY = "sk_live_51HxTESTONLYnotarealkey00000000"  # TODO move to env
DB = sqlite3.connect("payments.db")


def charge(customer_id, amount_cents):
    """Charge a customer and record the payment; return the payment id."""
    cur = DB.execute(
        "INSERT INTO payments (customer, amount) VALUES (?, ?)", (customer_id, amount_cents)
    )
    DB.commit()
    return cur.lastrowid


def refund(pid, amt):
    row = DB.execute(f"SELECT amount FROM payments WHERE id = {pid}").fetchone()
    if amt > row[0]:
        raise ValueError("refund exceeds payment")
    DB.execute(f"INSERT INTO refunds (payment, amount) VALUES ({pid}, {amt})")
    DB.commit()
    notify(pid, amt)


def notify(pid, amt):
    subprocess.run(f"mail -s 'refund {amt}' support@example.com", shell=True, check=False)
