"""Print the top of the quickstart's customers table."""

import os
import sqlite3

db = os.path.join(os.path.dirname(os.path.abspath(__file__)), "customers.db")
con = sqlite3.connect(db)
rows = con.execute(
    'SELECT "customer", "orders", "amount", "largest", "city" FROM "customers" ORDER BY "amount" DESC LIMIT 5'
).fetchall()
total = con.execute('SELECT count(*), sum("orders") FROM "customers"').fetchone()
print(f"{total[0]} customers, {total[1]} orders materialized. Top spenders:")
print(f"{'customer':<10}{'orders':>8}{'amount':>12}{'largest':>10}  city")
for c, n, a, big, city in rows:
    print(f"{c:<10}{n:>8}{a:>12.2f}{big:>10.2f}  {city}")  # money with its places
