mkdir -p data
printf 'a 1\nb 2\na 3\nc 4\nb 5\n' > data/kv.txt
printf 'id\tname\tscore\n1\tann\t90\n2\tbob\t75\n3\tcid\t82\n' > data/scores.tsv
printf 'p1 l1\np1 l2\n\n\np2 l1\np2 l2\np2 l3\n' > data/para.txt
printf '10 9\nabc abd\n2 10\n1e2 99\n 3 3.0\n' > data/pairs.txt
printf 'date,region,amount\n2024-01-03,east,120.50\n2024-01-03,west,80\n2024-01-04,east,99.5\n2024-01-05,north,10\n2024-01-05,west,40.25\n' > data/sales.csv
printf 'user:x:1000:1000:Ann:/home/ann:/bin/bash\nroot:x:0:0:root:/root:/bin/sh\n' > data/passwd
printf 'x\n\n  \ny z\n' > data/blanks.txt
printf '{ s += $2 }\nEND { print "sum", s }\n' > data/sum.awk
