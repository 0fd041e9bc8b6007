mkdir -p data/sub src logs
printf 'name,qty,price\napple,3,1.5\nbanana,12,0.25\ncherry,7,3\napple,1,1.5\n' > data/fruit.csv
printf 'alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\ntheta\niota\nkappa\nlambda\nmu\n' > data/greek.txt
printf 'line one\nline two\n\nline four\n' > data/lines.txt
printf '{"users": [{"name": "ann", "age": 31}, {"name": "bob", "age": 27}], "ok": true}\n' > data/users.json
printf 'def add(a, b):\n    return a + b\n\n# TODO: subtract\nprint(add(2, 3))\n' > src/calc.py
printf 'import sys\nprint("args:", sys.argv[1:])\n' > src/args.py
printf 'INFO start\nWARN disk\nERROR failed\nINFO done\nERROR again\n' > logs/app.log
printf 'deep\n' > data/sub/deep.txt
