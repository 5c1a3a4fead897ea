from memoryd.capture.fastpath import main

main()
