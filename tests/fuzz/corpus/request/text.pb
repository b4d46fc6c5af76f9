
req-1 
user
Hello <|im_end|> there333?(%fff?(2

2END